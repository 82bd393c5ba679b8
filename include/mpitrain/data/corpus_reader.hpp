// prepare-data's input as a stream of text pieces, read in bounded memory: plain text files,
// directories of them, standard input, and JSON Lines with a text field.
#pragma once

#include <cstdint>
#include <cstdio>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

namespace mpitrain {

// A plain text document is cut into pieces of about kPieceBytes, each at the first byte after
// that where an ASCII non-space character meets a space, tab or line end (no GPT-2 pre-token
// spans such a point, so byte and GPT-2 tokens are the same as the whole document's). A run of
// kMaxPieceBytes without one is cut there anyway (at a UTF-8 character's start).
inline constexpr size_t kPieceBytes = size_t{64} << 10;
inline constexpr size_t kMaxPieceBytes = size_t{1} << 20;

// Where a piece stands in the corpus: it starts the corpus, starts a later document, or goes on
// with the document of the piece before it.
enum class PieceStart { Corpus, Document, Continued };

struct TextPiece {
  std::string text;
  PieceStart start = PieceStart::Continued;
  bool ends_document = false;  // the document's last piece
  std::string prompt = {};     // a JSONL document's prompt field (CorpusReader): before text
  // A conversation (JsonlFields::messages): {"messages": [...], "tools": ...} as JSON in text, and
  // "file:line" of its row.
  bool conversation = false;
  std::string source = {};
};

// The fields of a JSON Lines row that prepare-data reads: its text, and for fine-tuning the prompt
// before it or, instead of both, a conversation's messages.
struct JsonlFields {
  std::string text = "text";
  std::string prompt = {};    // "" if none
  std::string messages = {};  // "" if none
};

enum class InputFormat { Auto, Text, Jsonl };  // Auto: JSONL if the name ends in .jsonl

struct CorpusInput {
  std::string path;  // "-": standard input
  bool jsonl = false;
  uint64_t bytes = 0;  // the file's size; 0 for standard input
};

// The inputs that the arguments name, in order: a file as given; a directory's regular files,
// recursively, sorted by path, without names starting with '.' (one line on `log` says what was
// taken and skipped); "-" standard input (once at most). UsageError naming the argument for a
// missing one, an empty directory, or a compressed file (.gz, .zst, .xz, .bz2: not read).
std::vector<CorpusInput> list_corpus_inputs(const std::vector<std::string>& args,
                                            InputFormat format, std::ostream& log);

// The pieces of the inputs in order. A text input is one document; a JSONL line (blank lines
// skipped) is one document and one piece: the string field `fields.text` of a JSON object, and
// with a `fields.prompt` its string too, in TextPiece::prompt; or with `fields.messages` that
// array of chat messages (objects with a string "role", in order; "tools" of the row beside them)
// as a conversation. UsageError naming the file and line otherwise. Memory: one piece plus
// kMaxPieceBytes.
class CorpusReader {
 public:
  CorpusReader(std::vector<CorpusInput> inputs, JsonlFields fields);

  bool next(TextPiece& piece);  // the next piece; false at the end of the last input
  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t documents() const { return documents_; }

 private:
  bool open_next_input();  // false when none is left
  bool read_more();        // appends a block of the open text input to buffer_; false at its end
  bool next_text_piece(TextPiece& piece);
  bool next_jsonl_piece(TextPiece& piece);
  PieceStart document_start() const;

  std::vector<CorpusInput> inputs_;
  JsonlFields fields_;
  size_t next_input_ = 0;
  std::unique_ptr<FILE, int (*)(FILE*)> file_{nullptr, std::fclose};
  FILE* in_ = nullptr;  // file_ or stdin
  const CorpusInput* current_ = nullptr;
  std::string buffer_;        // read and not yet given out
  size_t scanned_ = 0;        // buffer_[kPieceBytes, scanned_) holds no cut point
  bool at_end_ = false;       // of the open input
  bool piece_given_ = false;  // of the open text document
  uint64_t line_ = 0;         // of the open JSONL input
  uint64_t bytes_read_ = 0, documents_ = 0;
};

}  // namespace mpitrain
