// SentencePiece through the library: every util::Status is checked and its message reported.
#include <sentencepiece_processor.h>

#include "mpitrain/data/sentencepiece_tokenizer.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_file)
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()), model_file_(model_file) {
  const auto status = sp_->Load(model_file);
  require(status.ok(),
          "cannot load SentencePiece model '" + model_file + "': " + status.ToString());
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

int64_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

std::vector<uint32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(absl::string_view(text.data(), text.size()), &ids);
  if (!status.ok()) MPITRAIN_THROW("SentencePiece cannot encode: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string text;
  std::vector<int> run;
  const auto flush = [&] {
    std::string piece;
    const auto status = sp_->Decode(run, &piece);
    if (!status.ok()) MPITRAIN_THROW("SentencePiece cannot decode: " + status.ToString());
    text += piece;
    run.clear();
  };
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < sp_->GetPieceSize()) {
      run.push_back(ids[i]);
      continue;
    }
    flush();
    text += "<|" + std::to_string(ids[i]) + "|>";
  }
  flush();
  return text;
}

std::optional<uint32_t> SentencePieceTokenizer::document_start() const {
  const int bos = sp_->bos_id();
  if (bos < 0) return std::nullopt;
  return static_cast<uint32_t>(bos);
}

}  // namespace mpitrain
