// Tokenizers: text <-> token ids, and where the tokenizer of a token file is found.
//
// prepare-data writes, beside the token files it makes, `tokenizer.json` (kTokenizerFile):
//   {"name": "bytes" | "gpt2" | "sentencepiece" | "huggingface", "vocab_size": N,
//    "files": {ROLE: FILE, ...}}
// with copies of the files it names in the same directory (gpt2: "encoder" = encoder.json and
// "merges" = vocab.bpe, or "decoder" = llm.c's gpt2_tokenizer.bin, which only decodes;
// sentencepiece: "model" = tokenizer.model; huggingface: "tokenizer" = hf_tokenizer.json, a
// Hugging Face tokenizer.json, "config" = its tokenizer_config.json if it has one, and
// "chat_template" = chat_template.jinja, the template conversations were rendered by, if any;
// bytes: none). That descriptor is how a token file
// records its tokenizer; HDF5 token files also name it in their `tokenizer` attribute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

inline constexpr const char* kTokenizerFile = "tokenizer.json";
// The chat template file transformers reads beside a tokenizer, before tokenizer_config.json's
// chat_template: a Hugging Face tokenizer's file of role "chat_template", which every copy
// carries, so that a model fine-tuned on conversations is exported with the template its data
// were rendered by.
inline constexpr const char* kChatTemplateFile = "chat_template.jinja";

// A file a tokenizer is read from: its role in the descriptor, where it is now, and the name a
// copy gets beside token files.
struct TokenizerFile {
  std::string role;
  std::string path;
  std::string copy_name;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "bytes", "gpt2", "sentencepiece", "huggingface"
  virtual int64_t vocab_size() const = 0;
  virtual std::vector<uint32_t> encode(std::string_view text) const = 0;
  // Ids back to text; an id the tokenizer does not know is rendered as "<|id|>".
  virtual std::string decode(const int32_t* ids, size_t n) const = 0;
  // The token prepare-data puts before each document (GPT-2's <|endoftext|>, SentencePiece's
  // BOS); none for bytes, whose documents prepare-data separates with '\n'.
  virtual std::optional<uint32_t> document_start() const { return std::nullopt; }
  // The token prepare-data puts after each document (Hugging Face's eos_token); none for the
  // others.
  virtual std::optional<uint32_t> document_end() const { return std::nullopt; }
  // The files this tokenizer was read from (none for bytes).
  virtual std::vector<TokenizerFile> files() const { return {}; }
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

// A tokenizer from PATH: a kTokenizerFile descriptor, a Hugging Face tokenizer.json (with the
// tokenizer_config.json beside it, if any), a directory holding one of those (or GPT-2's
// encoder.json + vocab.bpe, or a tokenizer.model), a SentencePiece `.model`, or llm.c's
// gpt2_tokenizer.bin (decode only: its encode is a UsageError). UsageError naming the path when
// it is none of these, malformed, or names files that are missing.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& path);

// The kTokenizerFile text for tok with these files (its own, or prepare-data's with the chat
// template it rendered by), naming each by its copy_name.
std::string tokenizer_descriptor_json(const Tokenizer& tok,
                                      const std::vector<TokenizerFile>& files);

// The descriptor recorded for a token file: kTokenizerFile in its directory; "" if none.
std::string tokenizer_descriptor_of(const std::string& token_file);

// Copies a descriptor and the files it names into dir (created if missing; files there are
// replaced): a run directory keeps the tokenizer of its data (monitor/output_dir.hpp). A Hugging
// Face tokenizer.json (or a directory holding one) is copied as a descriptor would name it.
void copy_tokenizer(const std::string& descriptor, const std::string& dir);

// The tokenizer recorded for a token file: its tokenizer_descriptor_of, else the byte tokenizer
// when the file names "bytes" (HDF5 attribute); nullptr when nothing is recorded. A descriptor that
// is malformed or names files that are missing: UsageError naming it.
std::unique_ptr<Tokenizer> recorded_tokenizer(const TokenSource& src);

}  // namespace mpitrain
