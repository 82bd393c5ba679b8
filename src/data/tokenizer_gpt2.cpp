// GPT-2's byte-level BPE: from encoder.json + vocab.bpe (encodes and decodes) or llm.c's
// gpt2_tokenizer.bin (decodes).
#include <array>
#include <climits>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "mpitrain/data/gpt2_tokenizer.hpp"
#include "mpitrain/io/text_file.hpp"
#include "mpitrain/runtime/error.hpp"
#include "pcre2_regex.hpp"

namespace mpitrain {

namespace {

// OpenAI's encoder.py pattern.
constexpr const char* kPretokenizer =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// encoder.py's bytes_to_unicode: the printable bytes stand for themselves, the others for
// 256, 257, ... in byte order.
std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cps{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    cps[b] = printable ? b : next++;
  }
  return cps;
}

// The byte each mapped code point stands for (-1: none).
using ByteOf = std::array<int, 512>;
ByteOf invert(const std::array<uint32_t, 256>& cps) {
  ByteOf byte_of;
  byte_of.fill(-1);
  for (int b = 0; b < 256; ++b) byte_of[cps[b]] = b;
  return byte_of;
}

// A token of encoder.json (mapped code points, UTF-8) back to its bytes; false if a code point
// stands for no byte.
bool token_bytes(const std::string& token, const ByteOf& byte_of, std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xC0 && c < 0xE0 && i + 1 < token.size()) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      len = 2;
    }
    if (cp >= byte_of.size() || byte_of[cp] < 0) return false;
    bytes += static_cast<char>(byte_of[cp]);
    i += len;
  }
  return true;
}

std::string read_binary(const std::string& path, const std::string& what) {
  std::ifstream in = open_text_file(path, what);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  require(!in.bad(), "cannot read " + what + " '" + path + "'");
  return data;
}

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer() = default;
Gpt2Tokenizer::~Gpt2Tokenizer() = default;

std::unique_ptr<Gpt2Tokenizer> Gpt2Tokenizer::from_vocab(const std::string& encoder_json,
                                                         const std::string& vocab_bpe) {
  std::unique_ptr<Gpt2Tokenizer> tok(new Gpt2Tokenizer());
  const auto cps = byte_code_points();
  const ByteOf byte_of = invert(cps);

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
    require(token_bytes(token, byte_of, tok->decoder_[i]),
            "'" + encoder_json + "': token '" + token + "' is not in GPT-2's byte alphabet");
    encoder.emplace(token, i);
  }
  const auto eot = encoder.find("<|endoftext|>");
  require(eot != encoder.end(), "'" + encoder_json + "' has no <|endoftext|> token");
  tok->eot_ = eot->second;
  for (uint32_t cp : cps) {
    const auto id = encoder.find(utf8(cp));
    require(id != encoder.end(), "'" + encoder_json + "' lacks a token of GPT-2's byte alphabet");
    tok->byte_ids_.push_back(id->second);
  }

  std::ifstream merges = open_text_file(vocab_bpe, "GPT-2 merges (vocab.bpe)");
  std::string line;
  int rank = 0, line_no = 0;
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
    tok->merges_.emplace(pair_key(left->second, right->second), Merge{rank++, merged->second});
  }
  require(!merges.bad(), "cannot read '" + vocab_bpe + "'");
  require(rank > 0, "'" + vocab_bpe + "' holds no merges");
  tok->pretokenizer_ = std::make_unique<Pcre2Regex>(kPretokenizer);
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
  // Merge the adjacent pair of lowest rank, everywhere it occurs, until no pair has a rank.
  std::vector<uint32_t> merged;
  while (word.size() > 1) {
    const Merge* best = nullptr;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto m = merges_.find(pair_key(word[i], word[i + 1]));
      if (m != merges_.end() && (!best || m->second.rank < best->rank)) best = &m->second;
    }
    if (!best) break;
    merged.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size()) {
        const auto m = merges_.find(pair_key(word[i], word[i + 1]));
        if (m != merges_.end() && &m->second == best) {
          merged.push_back(best->id);
          ++i;
          continue;
        }
      }
      merged.push_back(word[i]);
    }
    word.swap(merged);
  }
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
