#include "mpitrain/train/batch_loader.hpp"

#include "mpitrain/data/loss_mask.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

BatchLoader::BatchLoader(SampleStream& stream, int seq_len, int global_batch, int micro_batch,
                         int dp_rank, int dp_size, const ContextChunks* chunks,
                         std::optional<DocumentBoundary> documents,
                         std::optional<int32_t> loss_boundary)
    : stream_(stream),
      seq_len_(seq_len),
      global_batch_(global_batch),
      micro_batch_(micro_batch),
      dp_rank_(dp_rank),
      dp_size_(dp_size),
      micro_batches_(global_batch / (dp_size * micro_batch)),
      chunks_(chunks),
      documents_(documents),
      loss_boundary_(loss_boundary),
      whole_tokens_(chunks ? seq_len : 0),
      whole_targets_(whole_tokens_.size()),
      whole_starts_(documents ? whole_tokens_.size() : 0) {
  if (global_batch % (dp_size * micro_batch) != 0)
    MPITRAIN_THROW("global batch not divisible by dp x micro-batch");
}

void BatchLoader::load(uint64_t consumed, int micro, int32_t* tokens, int32_t* targets,
                       int32_t* doc_starts) {
  const uint64_t first = consumed +
                         static_cast<uint64_t>(dp_rank_) * (global_batch_ / dp_size_) +
                         static_cast<uint64_t>(micro) * micro_batch_;
  for (int i = 0; i < micro_batch_; ++i) {
    const size_t row = static_cast<size_t>(i) * seq_len();
    if (!chunks_) {
      stream_.read(first + i, tokens + row, targets + row);
      if (documents_) document_starts(tokens + row, 1, seq_len_, *documents_, doc_starts + row);
    } else {
      stream_.read(first + i, whole_tokens_.data(), whole_targets_.data());
      chunks_->take(whole_tokens_.data(), tokens + row, 1);
      chunks_->take(whole_targets_.data(), targets + row, 1);
      if (documents_) {
        document_starts(whole_tokens_.data(), 1, seq_len_, *documents_, whole_starts_.data());
        chunks_->take(whole_starts_.data(), doc_starts + row, 1);
      }
    }
    if (loss_boundary_)  // position by position: the same before or after the chunks
      unscore_after_boundary(*loss_boundary_, tokens + row, targets + row, seq_len());
  }
}

}  // namespace mpitrain
