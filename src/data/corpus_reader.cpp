// prepare-data's input, read block by block: files, directories, stdin, JSON Lines.
#include "mpitrain/data/corpus_reader.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

constexpr size_t kReadBlockBytes = size_t{64} << 10;

// A row's conversation as chat_encoding.hpp reads it: {"messages": the array `field` of chat
// messages, "tools": the row's (if any)}, as JSON text in the row's key order.
std::string conversation_json(const nlohmann::ordered_json& row, const std::string& field,
                              const std::string& where) {
  const auto messages = row.is_object() ? row.find(field) : row.end();
  require(messages != row.end() && messages->is_array() && !messages->empty(),
          where + ": no array field '" + field + "' of chat messages (--messages-field names it)");
  for (size_t i = 0; i < messages->size(); ++i) {
    const auto& m = (*messages)[i];
    require(m.is_object() && m.contains("role") && m["role"].is_string(),
            where + ": message " + std::to_string(i + 1) + " of '" + field +
                "' is not an object with a string \"role\" (chat messages are {\"role\": ..., "
                "\"content\": ...}; ShareGPT's {\"from\", \"value\"} need converting)");
  }
  nlohmann::ordered_json conversation = {{"messages", *messages}};
  if (row.contains("tools")) conversation["tools"] = row["tools"];
  return conversation.dump();
}

bool is_compressed(const fs::path& path) {
  const std::string ext = path.extension().string();
  return ext == ".gz" || ext == ".zst" || ext == ".xz" || ext == ".bz2";
}

CorpusInput input_file(const fs::path& path, InputFormat format) {
  require(!is_compressed(path), "input '" + path.string() +
                                    "' is compressed, which prepare-data does not read: "
                                    "decompress it into standard input, e.g. zcat FILE | "
                                    "prepare-data ... -");
  std::error_code ec;
  const uint64_t bytes = fs::file_size(path, ec);
  require(!ec, "cannot read input '" + path.string() + "': " + ec.message());
  const bool jsonl =
      format == InputFormat::Jsonl || (format == InputFormat::Auto && path.extension() == ".jsonl");
  return {path.string(), jsonl, bytes};
}

std::string megabytes(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", static_cast<double>(bytes) / 1e6);
  return text;
}

// A directory's regular files (recursively, sorted, no hidden names) appended to inputs.
void list_directory(const fs::path& dir, InputFormat format, std::vector<CorpusInput>& inputs,
                    std::ostream& log) {
  std::vector<fs::path> files;
  size_t hidden = 0, other = 0;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    if (it->path().filename().string().starts_with(".")) {
      ++hidden;
      if (it->is_directory(ec)) it.disable_recursion_pending();
    } else if (it->is_regular_file(ec)) {
      files.push_back(it->path());
    } else if (!it->is_directory(ec)) {
      ++other;
    }
  }
  require(!ec, "cannot list input directory '" + dir.string() + "': " + ec.message());
  require(!files.empty(), "input directory '" + dir.string() + "' holds no files");
  std::sort(files.begin(), files.end());
  uint64_t bytes = 0;
  for (const auto& f : files) {
    inputs.push_back(input_file(f, format));
    bytes += inputs.back().bytes;
  }
  log << "prepare-data: " << dir.string() << ": " << files.size() << " files (" << megabytes(bytes)
      << ") taken in path order; skipped " << hidden << " hidden, " << other
      << " not regular files\n";
}

// Is there a cut point between text[i - 1] and text[i] (see kPieceBytes)?
bool is_cut_point(const std::string& text, size_t i) {
  const auto before = static_cast<unsigned char>(text[i - 1]);
  const char at = text[i];
  return before > 0x20 && before < 0x7f &&
         (at == ' ' || at == '\t' || at == '\n' || at == '\r' || at == '\f' || at == '\v');
}

}  // namespace

std::vector<CorpusInput> list_corpus_inputs(const std::vector<std::string>& args,
                                            InputFormat format, std::ostream& log) {
  std::vector<CorpusInput> inputs;
  bool stdin_taken = false;
  for (const auto& arg : args) {
    if (arg == "-") {
      require(!stdin_taken, "standard input (-) is named twice");
      stdin_taken = true;
      inputs.push_back({arg, format == InputFormat::Jsonl, 0});
      continue;
    }
    std::error_code ec;
    const auto status = fs::status(arg, ec);
    require(fs::exists(status), "input '" + arg + "' does not exist");
    if (fs::is_directory(status))
      list_directory(arg, format, inputs, log);
    else
      inputs.push_back(input_file(arg, format));
  }
  return inputs;
}

CorpusReader::CorpusReader(std::vector<CorpusInput> inputs, JsonlFields fields)
    : inputs_(std::move(inputs)), fields_(std::move(fields)) {}

PieceStart CorpusReader::document_start() const {
  return documents_ == 0 ? PieceStart::Corpus : PieceStart::Document;
}

bool CorpusReader::open_next_input() {
  file_.reset();
  in_ = nullptr;
  if (next_input_ == inputs_.size()) return false;
  current_ = &inputs_[next_input_++];
  if (current_->path == "-") {
    in_ = stdin;
  } else {
    file_.reset(std::fopen(current_->path.c_str(), "rb"));
    require(file_ != nullptr,
            "cannot read input '" + current_->path + "': " + std::strerror(errno));
    in_ = file_.get();
  }
  buffer_.clear();
  scanned_ = 0;
  at_end_ = false;
  piece_given_ = false;
  line_ = 0;
  return true;
}

bool CorpusReader::read_more() {
  if (at_end_) return false;
  const size_t old = buffer_.size();
  buffer_.resize(old + kReadBlockBytes);
  const size_t got = std::fread(buffer_.data() + old, 1, kReadBlockBytes, in_);
  buffer_.resize(old + got);
  bytes_read_ += got;
  if (got < kReadBlockBytes) {
    require(!std::ferror(in_), "error reading input '" + current_->path + "'");
    at_end_ = std::feof(in_);
  }
  return got > 0 || !at_end_;
}

bool CorpusReader::next_text_piece(TextPiece& piece) {
  size_t cut = std::string::npos;
  for (;;) {
    for (size_t i = std::max(kPieceBytes, scanned_); i < buffer_.size(); ++i)
      if (is_cut_point(buffer_, i)) {
        cut = i;
        break;
      }
    scanned_ = std::max(scanned_, buffer_.size());
    if (cut != std::string::npos) break;
    if (buffer_.size() >= kMaxPieceBytes) {  // no cut point: one at a character's start
      cut = kMaxPieceBytes;
      while (cut > kMaxPieceBytes - 3 && (static_cast<unsigned char>(buffer_[cut]) & 0xc0) == 0x80)
        --cut;
      break;
    }
    if (!read_more()) {
      if (piece_given_ && buffer_.empty()) return false;  // the document ended at a cut
      cut = buffer_.size();
      break;
    }
  }
  piece.start = piece_given_ ? PieceStart::Continued : document_start();
  if (!piece_given_) ++documents_;
  piece_given_ = true;
  piece.text.assign(buffer_, 0, cut);
  buffer_.erase(0, cut);
  scanned_ = 0;
  piece.ends_document = buffer_.empty() && !read_more();  // nothing of the input is left
  return true;
}

bool CorpusReader::next_jsonl_piece(TextPiece& piece) {
  for (;;) {
    size_t end = buffer_.find('\n', scanned_);
    scanned_ = end == std::string::npos ? buffer_.size() : end;
    if (end == std::string::npos && read_more()) continue;
    if (end == std::string::npos && buffer_.empty()) return false;
    if (end == std::string::npos) end = buffer_.size();  // a last line without '\n'
    const std::string line = buffer_.substr(0, end);
    buffer_.erase(0, std::min(end + 1, buffer_.size()));
    scanned_ = 0;
    ++line_;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = current_->path + ":" + std::to_string(line_);
    const auto record = nlohmann::ordered_json::parse(line, nullptr, false);
    require(!record.is_discarded(), where + ": not a JSON line");
    const auto string_field = [&](const std::string& name, const char* option) {
      const auto field = record.is_object() ? record.find(name) : record.end();
      require(field != record.end() && field->is_string(),
              where + ": no string field '" + name + "' (" + option);
      return field->get<std::string>();
    };
    if (!fields_.messages.empty()) {
      piece.text = conversation_json(record, fields_.messages, where);
      piece.conversation = true;
      piece.source = where;
    } else {
      piece.text = string_field(fields_.text, "--jsonl-field names the text's field)");
      piece.prompt = fields_.prompt.empty()
                         ? std::string()
                         : string_field(fields_.prompt, "--prompt-field names the prompt's field)");
    }
    piece.start = document_start();
    piece.ends_document = true;
    ++documents_;
    return true;
  }
}

bool CorpusReader::next(TextPiece& piece) {
  for (;;) {
    if (in_ && (current_->jsonl ? next_jsonl_piece(piece) : next_text_piece(piece))) return true;
    if (!open_next_input()) return false;
  }
}

}  // namespace mpitrain
