// Which samples each rank trains on: the global order cut by step, rank and micro-batch.
//
// A step that starts after c consumed samples takes global samples k = c .. c+G-1 of the one
// global order (data/samples.hpp). Data-parallel rank r takes the contiguous share
// k = c + r*G/dp + i, i < G/dp, and micro-batch m of it the rows i = m*mb .. m*mb+mb-1. The
// sequence of samples is therefore the same for any number of ranks, and a resumed run (even at
// another layout or batch size) continues it from the consumed count in the checkpoint.
#pragma once

#include <cstdint>

#include "mpitrain/data/samples.hpp"

namespace mpitrain {

class BatchLoader {
 public:
  BatchLoader(const SampleWindows& windows, const SampleOrder& order, int global_batch,
              int micro_batch, int dp_rank, int dp_size);

  int micro_batches() const { return micro_batches_; }  // per rank per step
  // tokens, targets: (micro_batch, seq_len) each.
  void load(uint64_t consumed, int micro, int32_t* tokens, int32_t* targets) const;

 private:
  const SampleWindows& windows_;
  const SampleOrder& order_;
  int global_batch_, micro_batch_, dp_rank_, dp_size_, micro_batches_;
};

}  // namespace mpitrain
