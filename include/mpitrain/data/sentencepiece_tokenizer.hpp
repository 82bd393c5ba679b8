// SentencePiece tokenizers (Llama-family models and those prepare-data trains), through the
// library (libsentencepiece).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mpitrain/data/tokenizer.hpp"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mpitrain {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  static constexpr const char* kName = "sentencepiece";

  // From a `.model` file; UsageError with the library's message when it does not load.
  explicit SentencePieceTokenizer(const std::string& model_file);
  ~SentencePieceTokenizer() override;

  std::string name() const override { return kName; }
  int64_t vocab_size() const override;
  std::vector<uint32_t> encode(std::string_view text) const override;
  std::string decode(const int32_t* ids, size_t n) const override;
  std::optional<uint32_t> document_start() const override;  // BOS, if the model has one
  std::vector<TokenizerFile> files() const override {
    return {{"model", model_file_, "tokenizer.model"}};
  }

 private:
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string model_file_;
};

// Trains a model of vocab_size pieces ("bpe" or "unigram") on texts (split into lines) and writes
// it to model_file. Settings for exact round trips: no normalization, whitespace kept, bytes
// that are no piece fall back to byte tokens. UsageError with the library's message when the
// text cannot give such a model (e.g. vocab_size too large for it).
void train_sentencepiece(const std::vector<std::string>& texts, int vocab_size,
                         const std::string& model_type, const std::string& model_file);

}  // namespace mpitrain
