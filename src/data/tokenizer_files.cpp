// Tokenizer descriptors (kTokenizerFile): finding, reading and copying them.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "mpitrain/data/gpt2_tokenizer.hpp"
#include "mpitrain/data/hf_tokenizer.hpp"
#include "mpitrain/data/sentencepiece_tokenizer.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/io/durable.hpp"
#include "mpitrain/io/text_file.hpp"
#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace mpitrain {

namespace {

// The roles of the files a tokenizer of this name reads; nullopt for a name this build lacks.
std::optional<std::vector<std::string>> roles_of(const std::string& name) {
  if (name == ByteTokenizer::kName) return std::vector<std::string>{};
  if (name == Gpt2Tokenizer::kName) return std::vector<std::string>{"decoder", "encoder", "merges"};
  if (name == SentencePieceTokenizer::kName) return std::vector<std::string>{"model"};
  if (name == HfTokenizer::kName)
    return std::vector<std::string>{"tokenizer", "config", "chat_template"};
  return std::nullopt;
}

// UsageError unless files.<role> = name is a file directly in dir, the descriptor's directory,
// also once links are resolved: a descriptor that came with a data set must not make the program
// read or copy any other file (an absolute path, "../x" or a link out of dir are refused).
void require_inside(const std::string& file, const fs::path& dir, const std::string& role,
                    const std::string& name) {
  const std::string field = "'" + file + "': files." + role + " = '" + name + "'";
  const fs::path p(name);
  require(p == p.filename() && name != "." && name != "..",
          field + " is not a plain file name: a tokenizer's files lie in its own directory");
  const fs::path named = dir / p;
  require(fs::is_regular_file(named),
          "'" + file + "' names " + role + " file '" + named.string() + "', which does not exist");
  std::error_code ec, dir_ec;
  const fs::path real = fs::canonical(named, ec);
  const fs::path real_dir = fs::canonical(dir.empty() ? "." : dir, dir_ec);
  require(!ec && !dir_ec, field + ": cannot resolve it: " + (ec ? ec : dir_ec).message());
  require(real.parent_path() == real_dir,
          field + " is a link to '" + real.string() +
              "', outside the tokenizer's directory: a tokenizer's files lie in its own directory");
}

// The descriptor at path (a directory: its kTokenizerFile), parsed and checked; UsageError
// naming the file and field if malformed.
json read_descriptor(const std::string& path, std::string& file) {
  file = fs::is_directory(path) ? (fs::path(path) / kTokenizerFile).string() : path;
  std::ifstream in = open_text_file(file, "tokenizer descriptor");
  json d = json::parse(in, nullptr, /*allow_exceptions=*/false);
  require(d.is_object() && d.contains("name") && d["name"].is_string(),
          "'" + file + "' is not a tokenizer descriptor: expected a JSON object with a string " +
              "\"name\" (bytes, gpt2, sentencepiece or huggingface), or a Hugging Face tokenizer.json");
  const std::string name = d["name"].get<std::string>();
  const std::optional<std::vector<std::string>> roles = roles_of(name);
  require(roles.has_value(),
          "'" + file + "' names tokenizer '" + name +
              "', which this build does not know (bytes, gpt2, sentencepiece or huggingface)");
  if (!d.contains("files")) d["files"] = json::object();
  require(d["files"].is_object(), "'" + file + "': \"files\" must be an object {role: file name}");
  for (const auto& [role, named] : d["files"].items()) {
    require(std::find(roles->begin(), roles->end(), role) != roles->end(),
            "'" + file + "': files." + role + " is not a file of tokenizer '" + name + "'" +
                (roles->empty() ? " (it reads none)" : ""));
    require(named.is_string() && !named.get<std::string>().empty(),
            "'" + file + "': files." + role + " must be a file name");
    require_inside(file, fs::path(file).parent_path(), role, named.get<std::string>());
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
  if (name == HfTokenizer::kName)
    return HfTokenizer::from_files(
        named_file(d, file, "tokenizer"),
        d["files"].contains("config") ? named_file(d, file, "config") : "",
        d["files"].contains("chat_template") ? named_file(d, file, "chat_template") : "");
  // sentencepiece: the last name roles_of knows
  return std::make_unique<SentencePieceTokenizer>(named_file(d, file, "model"));
}

bool starts_with_llmc_tokenizer_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  return in.read(reinterpret_cast<char*>(&magic), sizeof magic) &&
         magic == Gpt2Tokenizer::kLlmcMagic;
}

// A Hugging Face tokenizer.json, with the tokenizer_config.json and chat_template.jinja beside it
// where there are.
std::unique_ptr<Tokenizer> from_hf_file(const fs::path& file) {
  const auto beside = [&](const char* name) {
    const fs::path p = file.parent_path() / name;
    std::error_code ec;
    return fs::is_regular_file(p, ec) ? p.string() : std::string();
  };
  return HfTokenizer::from_files(file.string(), beside(HfTokenizer::kConfigFile),
                                 beside(kChatTemplateFile));
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::is_regular_file(dir / kTokenizerFile, ec))
      return HfTokenizer::is_hf_tokenizer_json((dir / kTokenizerFile).string())
                 ? from_hf_file(dir / kTokenizerFile)
                 : from_descriptor(path);
    if (fs::is_regular_file(dir / "encoder.json", ec) && fs::is_regular_file(dir / "vocab.bpe", ec))
      return Gpt2Tokenizer::from_vocab((dir / "encoder.json").string(),
                                       (dir / "vocab.bpe").string());
    if (fs::is_regular_file(dir / "tokenizer.model", ec))
      return std::make_unique<SentencePieceTokenizer>((dir / "tokenizer.model").string());
    throw UsageError("directory '" + path + "' holds no tokenizer: expected " + kTokenizerFile +
                     " (a descriptor or Hugging Face's), GPT-2's encoder.json + vocab.bpe, or a "
                     "SentencePiece tokenizer.model");
  }
  require(fs::is_regular_file(path, ec), "tokenizer '" + path + "' does not exist");
  if (fs::path(path).extension() == ".model") return std::make_unique<SentencePieceTokenizer>(path);
  if (starts_with_llmc_tokenizer_magic(path)) return Gpt2Tokenizer::from_llmc(path);
  if (HfTokenizer::is_hf_tokenizer_json(path)) return from_hf_file(path);
  return from_descriptor(path);
}

std::string tokenizer_descriptor_json(const Tokenizer& tok,
                                      const std::vector<TokenizerFile>& files) {
  json d = {{"name", tok.name()}, {"vocab_size", tok.vocab_size()}, {"files", json::object()}};
  for (const auto& f : files) d["files"][f.role] = f.copy_name;
  return d.dump(2) + "\n";
}

std::string tokenizer_descriptor_of(const std::string& token_file) {
  const fs::path descriptor = fs::path(token_file).parent_path() / kTokenizerFile;
  return fs::is_regular_file(descriptor) ? descriptor.string() : "";
}

void copy_tokenizer(const std::string& descriptor, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  require(!ec, "cannot create '" + dir + "': " + ec.message());
  const auto copy = [&](const fs::path& from, const std::string& name) {
    fs::copy_file(from, fs::path(dir) / name, fs::copy_options::overwrite_existing, ec);
    require(!ec, "cannot copy '" + from.string() + "' into '" + dir + "': " + ec.message());
  };
  const fs::path hf = fs::is_directory(descriptor) ? fs::path(descriptor) / kTokenizerFile
                                                   : fs::path(descriptor);
  if (HfTokenizer::is_hf_tokenizer_json(hf.string())) {  // a descriptor is written for it
    const auto tok = from_hf_file(hf);
    for (const auto& f : tok->files()) copy(f.path, f.copy_name);
    write_file_synced((fs::path(dir) / kTokenizerFile).string(),
                      tokenizer_descriptor_json(*tok, tok->files()));
    return;
  }
  std::string file;
  const json d = read_descriptor(descriptor, file);
  const auto copy_same = [&](const fs::path& from) { copy(from, from.filename().string()); };
  copy_same(file);
  for (const auto& [role, name] : d["files"].items())
    copy_same(fs::path(file).parent_path() / name.get<std::string>());
}

std::unique_ptr<Tokenizer> recorded_tokenizer(const TokenSource& src) {
  if (const std::string d = tokenizer_descriptor_of(src.path()); !d.empty())
    return from_descriptor(d);
  if (src.tokenizer() == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  return nullptr;
}

}  // namespace mpitrain
