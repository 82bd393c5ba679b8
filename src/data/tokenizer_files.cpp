// Tokenizer descriptors (kTokenizerFile): finding, reading and copying them.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mpitrain/data/gpt2_tokenizer.hpp"
#include "mpitrain/data/sentencepiece_tokenizer.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/io/text_file.hpp"
#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mpitrain {

namespace {

// The descriptor at path (a directory: its kTokenizerFile), parsed; UsageError if malformed.
json read_descriptor(const std::string& path, std::string& file) {
  file = fs::is_directory(path) ? (fs::path(path) / kTokenizerFile).string() : path;
  std::ifstream in = open_text_file(file, "tokenizer descriptor");
  json d = json::parse(in, nullptr, /*allow_exceptions=*/false);
  require(d.is_object() && d.contains("name") && d["name"].is_string(),
          "'" + file + "' is not a tokenizer descriptor: expected a JSON object with a string " +
              "\"name\" (bytes, gpt2 or sentencepiece)");
  if (!d.contains("files")) d["files"] = json::object();
  require(d["files"].is_object(), "'" + file + "': \"files\" must be an object {role: file name}");
  for (const auto& [role, name] : d["files"].items()) {
    require(name.is_string() && !name.get<std::string>().empty(),
            "'" + file + "': files." + role + " must be a file name");
    const fs::path named = fs::path(file).parent_path() / name.get<std::string>();
    require(fs::is_regular_file(named), "'" + file + "' names " + role + " file '" +
                                            named.string() + "', which does not exist");
  }
  return d;
}

// The file of role in descriptor d (read from file); UsageError if it names none.
std::string named_file(const json& d, const std::string& file, const std::string& role) {
  require(d["files"].contains(role), "'" + file + "' names tokenizer '" +
                                         d["name"].get<std::string>() + "' but no files." + role);
  return (fs::path(file).parent_path() / d["files"][role].get<std::string>()).string();
}

std::unique_ptr<Tokenizer> from_descriptor(const std::string& path) {
  std::string file;
  const json d = read_descriptor(path, file);
  const std::string name = d["name"].get<std::string>();
  if (name == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  if (name == Gpt2Tokenizer::kName) {
    if (d["files"].contains("decoder"))
      return Gpt2Tokenizer::from_llmc(named_file(d, file, "decoder"));
    const std::string encoder = named_file(d, file, "encoder");  // the first one missing is named
    return Gpt2Tokenizer::from_vocab(encoder, named_file(d, file, "merges"));
  }
  if (name == SentencePieceTokenizer::kName)
    return std::make_unique<SentencePieceTokenizer>(named_file(d, file, "model"));
  throw UsageError("'" + file + "' names tokenizer '" + name +
                   "', which this build does not know (bytes, gpt2 or sentencepiece)");
}

bool starts_with_llmc_tokenizer_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) &&
         magic == Gpt2Tokenizer::kLlmcMagic;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::is_regular_file(dir / kTokenizerFile, ec)) return from_descriptor(path);
    if (fs::is_regular_file(dir / "encoder.json", ec) && fs::is_regular_file(dir / "vocab.bpe", ec))
      return Gpt2Tokenizer::from_vocab((dir / "encoder.json").string(),
                                       (dir / "vocab.bpe").string());
    if (fs::is_regular_file(dir / "tokenizer.model", ec))
      return std::make_unique<SentencePieceTokenizer>((dir / "tokenizer.model").string());
    throw UsageError("directory '" + path + "' holds no tokenizer: expected " + kTokenizerFile +
                     ", GPT-2's encoder.json + vocab.bpe, or a SentencePiece tokenizer.model");
  }
  require(fs::is_regular_file(path, ec), "tokenizer '" + path + "' does not exist");
  if (fs::path(path).extension() == ".model") return std::make_unique<SentencePieceTokenizer>(path);
  if (starts_with_llmc_tokenizer_magic(path)) return Gpt2Tokenizer::from_llmc(path);
  return from_descriptor(path);
}

std::string tokenizer_descriptor_json(const Tokenizer& tok) {
  json d = {{"name", tok.name()}, {"vocab_size", tok.vocab_size()}, {"files", json::object()}};
  for (const auto& f : tok.files()) d["files"][f.role] = f.copy_name;
  return d.dump(2) + "\n";
}

std::string tokenizer_descriptor_of(const std::string& token_file) {
  const fs::path descriptor = fs::path(token_file).parent_path() / kTokenizerFile;
  return fs::is_regular_file(descriptor) ? descriptor.string() : "";
}

void copy_tokenizer(const std::string& descriptor, const std::string& dir) {
  std::string file;
  const json d = read_descriptor(descriptor, file);
  std::error_code ec;
  fs::create_directories(dir, ec);
  require(!ec, "cannot create '" + dir + "': " + ec.message());
  const auto copy = [&](const fs::path& from) {
    fs::copy_file(from, fs::path(dir) / from.filename(), fs::copy_options::overwrite_existing, ec);
    require(!ec, "cannot copy '" + from.string() + "' into '" + dir + "': " + ec.message());
  };
  copy(file);
  for (const auto& [role, name] : d["files"].items())
    copy(fs::path(file).parent_path() / name.get<std::string>());
}

std::unique_ptr<Tokenizer> recorded_tokenizer(const TokenSource& src) {
  if (const std::string d = tokenizer_descriptor_of(src.path()); !d.empty())
    return from_descriptor(d);
  if (src.tokenizer() == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  return nullptr;
}

}  // namespace mpitrain
