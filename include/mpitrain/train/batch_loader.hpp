// Which samples each rank trains on: the global order cut by step, rank and micro-batch.
//
// A step that starts after c consumed samples takes global samples k = c .. c+G-1 of the one
// global order (data/samples.hpp). Data-parallel rank r takes the contiguous share
// k = c + r*G/dp + i, i < G/dp, and micro-batch m of it the rows i = m*mb .. m*mb+mb-1 (the
// global order over a blend of files: data/sample_stream.hpp). The
// sequence of samples is therefore the same for any number of ranks, and a resumed run (even at
// another layout or batch size) continues it from the consumed count in the checkpoint.
// Under context parallelism (chunks given) each cp rank of a dp rank takes the same samples and
// keeps its two chunks of each (parallel/context_chunks.hpp): rows of chunks->local_len().
// With document masking (a boundary given) each row's tokens also get their documents' starts
// (data/document_starts.hpp), found in the whole sample before its chunks are taken. With loss
// masking (a loss boundary given) the targets after that token are kUnscored (data/loss_mask.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "mpitrain/data/document_starts.hpp"
#include "mpitrain/data/sample_stream.hpp"
#include "mpitrain/parallel/context_chunks.hpp"

namespace mpitrain {

class BatchLoader {
 public:
  BatchLoader(SampleStream& stream, int seq_len, int global_batch, int micro_batch, int dp_rank,
              int dp_size, const ContextChunks* chunks = nullptr,
              std::optional<DocumentBoundary> documents = std::nullopt,
              std::optional<int32_t> loss_boundary = std::nullopt);

  int micro_batches() const { return micro_batches_; }  // per rank per step
  int micro_batch() const { return micro_batch_; }
  int seq_len() const { return chunks_ ? chunks_->local_len() : seq_len_; }  // rows handed out
  int global_batch() const { return global_batch_; }
  bool masks_documents() const { return documents_.has_value(); }
  // tokens, targets and, with document masking, doc_starts: (micro_batch, seq_len()) each
  // (doc_starts null without). Not thread-safe (the stream is not).
  void load(uint64_t consumed, int micro, int32_t* tokens, int32_t* targets,
            int32_t* doc_starts = nullptr);

 private:
  SampleStream& stream_;
  int seq_len_, global_batch_, micro_batch_, dp_rank_, dp_size_, micro_batches_;
  const ContextChunks* chunks_;
  std::optional<DocumentBoundary> documents_;
  std::optional<int32_t> loss_boundary_;
  std::vector<int32_t> whole_tokens_, whole_targets_, whole_starts_;  // with chunks: one sample
};

}  // namespace mpitrain
