// Hugging Face `tokenizer.json`, the byte-level BPE kind that Llama 3, Qwen 2.5 / 3 and GPT-2
// ship, as Hugging Face's `tokenizers` encodes it:
//   1. added_tokens (special or not) are found in the text first, longest at the leftmost place;
//   2. the text between them is normalized (null or NFC), then split by the pre-tokenizer (a
//      Sequence of Split with a Regex or String pattern and a behavior Isolated, Removed,
//      MergedWithPrevious, MergedWithNext or Contiguous; ByteLevel with add_prefix_space and
//      use_regex, GPT-2's pattern); regexes read \s as Unicode White_Space (pcre2_regex.hpp);
//   3. each piece's bytes are mapped to the byte alphabet and merged by the BPE model's merges
//      ("a b" or ["a", "b"]); with ignore_merges a piece that is a whole vocabulary token is it.
// Decoding is the ByteLevel decoder: tokens back to bytes. Anything else in the file (another
// model, normalizer, pre-tokenizer, post-processor or decoder, an option that would change the
// ids) is a UsageError naming it, never ignored.
//
// Document boundaries (prepare-data): tokenizer_config.json's bos_token before each document
// (none when add_bos_token is false) and eos_token after it; without that file, the special tokens
// the post-processor (TemplateProcessing) puts before and after a single sequence.
#pragma once

#include <memory>
#include <string>

#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

struct HfModel;

class HfTokenizer final : public Tokenizer {
 public:
  static constexpr const char* kName = "huggingface";
  static constexpr const char* kConfigFile = "tokenizer_config.json";
  // The name tokenizer.json gets beside token files, where kTokenizerFile is the descriptor.
  static constexpr const char* kCopyName = "hf_tokenizer.json";
  // From tokenizer_json, and config_json (tokenizer_config.json) and chat_template (a Jinja
  // file) unless "". UsageError naming the file and the field when one is unreadable, malformed
  // or asks for what this tokenizer does not do.
  static std::unique_ptr<HfTokenizer> from_files(const std::string& tokenizer_json,
                                                 const std::string& config_json,
                                                 const std::string& chat_template = "");
  // Whether the JSON file at path is a Hugging Face tokenizer.json: an object with a "model"
  // and no "name" (which a descriptor has).
  static bool is_hf_tokenizer_json(const std::string& path);

  ~HfTokenizer() override;
  std::string name() const override { return kName; }
  int64_t vocab_size() const override;
  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::optional<uint32_t> document_start() const override;
  std::optional<uint32_t> document_end() const override;
  std::vector<TokenizerFile> files() const override;

 private:
  explicit HfTokenizer(std::unique_ptr<const HfModel> model);
  std::unique_ptr<const HfModel> m_;
};

}  // namespace mpitrain
