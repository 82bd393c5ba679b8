// Tokenizers: text <-> token ids, and where the tokenizer of a token file is found.
//
// prepare-data writes, beside the token files it makes, `tokenizer.json` (kTokenizerFile):
//   {"name": "bytes" | "gpt2" | "sentencepiece", "vocab_size": N, "files": {ROLE: FILE, ...}}
// with copies of the files it names in the same directory (gpt2: "encoder" = encoder.json and
// "merges" = vocab.bpe; sentencepiece: "model" = tokenizer.model; bytes: none). That descriptor
// is how a token file records its tokenizer; HDF5 token files also name it in their `tokenizer`
// attribute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

inline constexpr const char* kTokenizerFile = "tokenizer.json";

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "bytes", "gpt2", "sentencepiece"
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  // Ids back to text; an id the tokenizer does not know is rendered as "<|id|>".
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
};

// The byte-level tokenizer: one token per byte, vocabulary 256.
class ByteTokenizer final : public Tokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  static constexpr const char* kName = "bytes";

  std::string name() const override { return kName; }
  int64_t vocab_size() const override { return kVocabSize; }
  std::vector<uint32_t> encode(std::string_view text) const override;  // byte b -> id b
  std::string decode(const int32_t* ids, size_t n) const override;
};

// A tokenizer from PATH: a kTokenizerFile descriptor, or a directory holding one. UsageError
// naming the path when it is none of these, malformed, or names files that are missing.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// The descriptor recorded for a token file: kTokenizerFile in its directory; "" if none.
std::string tokenizer_descriptor_of(const std::string& token_file);

// Copies a descriptor and the files it names into dir (created if missing; files there are
// replaced): a run directory keeps the tokenizer of its data (monitor/output_dir.hpp).
void copy_tokenizer(const std::string& descriptor, const std::string& dir);

// The tokenizer recorded for a token file: its tokenizer_descriptor_of, else the byte tokenizer
// when the file names "bytes" (HDF5 attribute); nullptr when nothing is recorded. A descriptor that
// is malformed or names files that are missing: UsageError naming it.
std::unique_ptr<Tokenizer> recorded_tokenizer(const TokenSource& src);

}  // namespace mpitrain
