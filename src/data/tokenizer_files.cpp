// Tokenizer descriptors (kTokenizerFile): finding, reading and copying them.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path) {
  std::string file;
  const json d = read_descriptor(path, file);
  const std::string name = d["name"].get<std::string>();
  if (name == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  throw UsageError("'" + file + "' names tokenizer '" + name + "', which this build does not know");
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
    return load_tokenizer(d);
  if (src.tokenizer() == ByteTokenizer::kName) return std::make_unique<ByteTokenizer>();
  return nullptr;
}

}  // namespace mpitrain
