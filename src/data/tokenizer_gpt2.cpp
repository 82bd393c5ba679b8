// GPT-2's byte-level BPE: from encoder.json + vocab.bpe (encodes and decodes) or llm.c's
// gpt2_tokenizer.bin (decodes).
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "mpitrain/data/gpt2_tokenizer.hpp"
#include "mpitrain/io/text_file.hpp"
#include "mpitrain/runtime/error.hpp"
#include "byte_level.hpp"
#include "pcre2_regex.hpp"

namespace mpitrain {

namespace {

std::string read_binary(const std::string& path, const std::string& what) {
  std::ifstream in = open_text_file(path, what);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  require(!in.bad(), "cannot read " + what + " '" + path + "'");
  return data;
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer() : merges_(std::make_unique<BpeMerges>()) {}
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_vocab(const std::string& encoder_json,
                                                         const std::string& vocab_bpe) {
  std::unique_ptr<Gpt2Tokenizer> tok(new Gpt2Tokenizer());
  const ByteAlphabet alphabet;

  const nlohmann::json enc = nlohmann::json::parse(read_binary(encoder_json, "GPT-2 encoder"),
                                                   nullptr, /*allow_exceptions=*/false);
  require(enc.is_object() && !enc.empty(), "'" + encoder_json +
                                               "' is not GPT-2's encoder.json (a JSON object "
                                               "{token: id})");
  tok->decoder_.resize(enc.size());
  std::unordered_map<std::string, uint32_t> encoder;  // mapped token -> id
  std::vector<bool> seen(enc.size());
  for (const auto& [token, id] : enc.items()) {
    require(id.is_number_unsigned() && id.get<uint64_t>() < enc.size() && !seen[id.get<size_t>()],
            "'" + encoder_json + "': the id of token '" + token + "' is not a distinct integer " +
                "in [0, " + std::to_string(enc.size()) + ")");
    const auto i = id.get<uint32_t>();
    seen[i] = true;
    require(alphabet.bytes_of(token, tok->decoder_[i]),
            "'" + encoder_json + "': token '" + token + "' is not in GPT-2's byte alphabet");
    encoder.emplace(token, i);
  }
  const auto eot = encoder.find("<|endoftext|>");
  require(eot != encoder.end(), "'" + encoder_json + "' has no <|endoftext|> token");
  tok->eot_ = eot->second;
  for (uint32_t cp : alphabet.code_point) {
    const auto id = encoder.find(utf8(cp));
    require(id != encoder.end(), "'" + encoder_json + "' lacks a token of GPT-2's byte alphabet");
    tok->byte_ids_.push_back(id->second);
  }

  std::ifstream merges = open_text_file(vocab_bpe, "GPT-2 merges (vocab.bpe)");
  std::string line;
  int line_no = 0;
  while (std::getline(merges, line)) {
    ++line_no;
    if (line.empty() || (line_no == 1 && line.starts_with("#version"))) continue;
    const std::string where = "'" + vocab_bpe + "' line " + std::to_string(line_no);
    const auto space = line.find(' ');
    require(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                line.find(' ', space + 1) == std::string::npos,
            where + " is not a merge 'left right': '" + line + "'");
    const auto left = encoder.find(line.substr(0, space));
    const auto right = encoder.find(line.substr(space + 1));
    const auto merged = encoder.find(line.substr(0, space) + line.substr(space + 1));
    require(left != encoder.end() && right != encoder.end() && merged != encoder.end(),
            where + " merges tokens that '" + encoder_json + "' does not hold: '" + line + "'");
    tok->merges_->add(left->second, right->second, merged->second);
  }
  require(!merges.bad(), "cannot read '" + vocab_bpe + "'");
  require(tok->merges_->size() > 0, "'" + vocab_bpe + "' holds no merges");
  tok->pretokenizer_ = std::make_unique<Pcre2Regex>(with_unicode_white_space(kGpt2Pattern));
  tok->files_ = {{"encoder", encoder_json, "encoder.json"}, {"merges", vocab_bpe, "vocab.bpe"}};
  return tok;
}

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_llmc(const std::string& tokenizer_bin) {
  const std::string data = read_binary(tokenizer_bin, "llm.c tokenizer");
  const std::string bad = "'" + tokenizer_bin + "' is not llm.c's gpt2_tokenizer.bin: ";
  std::array<int32_t, 256> header{};
  require(data.size() >= sizeof header, bad + "shorter than its 1024-byte header");
  std::memcpy(header.data(), data.data(), sizeof header);
  require(header[0] == kLlmcMagic,
          bad + "magic " + std::to_string(header[0]) + ", expected " + std::to_string(kLlmcMagic));
  require(header[1] == 1 || header[1] == 2,
          bad + "version " + std::to_string(header[1]) + ", expected 1 or 2");
  require(header[2] > 0, bad + "vocabulary size " + std::to_string(header[2]));
  std::unique_ptr<Gpt2Tokenizer> tok(new Gpt2Tokenizer());
  tok->eot_ = header[1] == 2 ? static_cast<uint32_t>(header[3]) : kEndOfText;
  size_t pos = sizeof header;
  for (int32_t i = 0; i < header[2]; ++i) {
    require(pos < data.size(),
            bad + "it ends at token " + std::to_string(i) + " of " + std::to_string(header[2]));
    const auto len = static_cast<unsigned char>(data[pos++]);
    require(pos + len <= data.size(), bad + "token " + std::to_string(i) + " runs past its end");
    tok->decoder_.emplace_back(data, pos, len);
    pos += len;
  }
  require(tok->eot_ < tok->decoder_.size(),
          bad + "end-of-text id " + std::to_string(tok->eot_) + " is not in its vocabulary");
  tok->files_ = {{"decoder", tokenizer_bin, "gpt2_tokenizer.bin"}};
  return tok;
}

std::vector<uint32_t> Gpt2Tokenizer::encode(std::string_view text) const {
  if (byte_ids_.empty())
    throw UsageError("llm.c's gpt2_tokenizer.bin only decodes; give encoder.json + vocab.bpe");
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3);
  std::unordered_map<std::string, std::vector<uint32_t>> cache;
  Pcre2Regex::Matcher matcher(*pretokenizer_);
  size_t pos = 0, start = 0, end = 0;
  while (pos < text.size()) {
    // Bytes that are not valid UTF-8 match nothing: they become a piece of their own.
    if (!matcher.next(text, pos, start, end)) start = end = text.size();
    if (start > pos) encode_piece(text.substr(pos, start - pos), ids, cache);
    if (end > start) encode_piece(text.substr(start, end - start), ids, cache);
    pos = end;
  }
  return ids;
}

void Gpt2Tokenizer::encode_piece(
    std::string_view piece, std::vector<uint32_t>& out,
    std::unordered_map<std::string, std::vector<uint32_t>>& cache) const {
  const std::string key(piece);
  if (const auto hit = cache.find(key); hit != cache.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<uint32_t> word;
  for (char c : piece) word.push_back(byte_ids_[static_cast<unsigned char>(c)]);
  merges_->apply(word);
  const std::vector<uint32_t>& ids = cache.emplace(key, std::move(word)).first->second;
  out.insert(out.end(), ids.begin(), ids.end());
}

std::string Gpt2Tokenizer::decode(const int32_t* ids, size_t n) const {
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && static_cast<size_t>(ids[i]) < decoder_.size())
      text += decoder_[ids[i]];
    else
      text += "<|" + std::to_string(ids[i]) + "|>";
  }
  return text;
}

}  // namespace mpitrain
