// GPT-2's byte-level BPE (the tokenizer of GPT-2 and llm.c's GPT-2 data), vocabulary 50257.
//
// Encoding, as OpenAI's encoder.py: the text is split by GPT-2's pre-tokenizer regex (PCRE2,
// UTF + UCP; \s as Python's `regex` has it, Unicode White_Space), each piece's bytes are mapped
// to printable code points (byte_to_unicode), merged by the ranks of vocab.bpe (on ids: each
// merge joins two tokens of encoder.json into a third), and looked up in encoder.json. Decoding
// maps ids back to bytes; llm.c's
// gpt2_tokenizer.bin (header int32[256]: magic 20240328, version 1 or 2, vocab size, [3] the
// end-of-text id in v2; then per token a uint8 length and its bytes) gives the same decoder only.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

class Pcre2Regex;
class BpeMerges;

class Gpt2Tokenizer final : public Tokenizer {
 public:
  static constexpr const char* kName = "gpt2";
  static constexpr uint32_t kEndOfText = 50256;  // <|endoftext|>
  static constexpr int32_t kLlmcMagic = 20240328;

  // From the GPT-2 release files. UsageError naming the file when one is unreadable or malformed.
  static std::unique_ptr<Gpt2Tokenizer> from_vocab(const std::string& encoder_json,
                                                   const std::string& vocab_bpe);
  // From llm.c's gpt2_tokenizer.bin: decodes; encode is a UsageError.
  static std::unique_ptr<Gpt2Tokenizer> from_llmc(const std::string& tokenizer_bin);

  ~Gpt2Tokenizer() override;
  std::string name() const override { return kName; }
  int64_t vocab_size() const override { return static_cast<int64_t>(decoder_.size()); }
  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::optional<uint32_t> document_start() const override { return eot_; }
  std::vector<TokenizerFile> files() const override { return files_; }

 private:
  Gpt2Tokenizer();
  // The ids of one pre-tokenized piece; cache: piece -> ids, for this encode call.
  void encode_piece(std::string_view piece, std::vector<uint32_t>& out,
                    std::unordered_map<std::string, std::vector<uint32_t>>& cache) const;

  std::vector<std::string> decoder_;            // id -> bytes
  std::vector<uint32_t> byte_ids_;              // byte -> its token (empty: decode only)
  std::unique_ptr<BpeMerges> merges_;
  std::unique_ptr<Pcre2Regex> pretokenizer_;
  uint32_t eot_ = kEndOfText;
  std::vector<TokenizerFile> files_;
};

}  // namespace mpitrain
