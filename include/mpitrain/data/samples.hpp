// Training samples and their one global order.
#pragma once

#include <cstdint>
#include <vector>

#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

// Training samples are windows of seq_len+1 tokens with stride seq_len (as llm.c):
// sample i = tokens [i*T, i*T+T+1); inputs = its first T tokens, targets = its last T.
class SampleWindows {
 public:
  // UsageError (naming the file, its token count and T+1) if fewer than seq_len+1 tokens.
  SampleWindows(const TokenSource& src, int seq_len);  // src must outlive this
  uint64_t count() const { return count_; }            // (size-1)/seq_len
  int seq_len() const { return seq_len_; }
  // inputs[t] = token i*T+t, targets[t] = token i*T+t+1, t < T; Error if sample >= count().
  void read(uint64_t sample, int32_t* inputs, int32_t* targets) const;

 private:
  const TokenSource& src_;
  int seq_len_;
  uint64_t count_;
};

// The one global order of samples: the k-th sample of the stream, epochs concatenated
// (epoch = k / n). With shuffle, each epoch is a Fisher–Yates permutation drawn from
// Rng(seed, epoch), so the sequence does not depend on the number of ranks or on how it is
// queried. Without shuffle, k % n.
class SampleOrder {
 public:
  SampleOrder(uint64_t n_samples, uint64_t seed, bool shuffle);  // n_samples > 0
  uint64_t n_samples() const { return n_; }
  // The sample index at stream position k. Caches the current epoch's permutation (n * 8
  // bytes): O(1) amortised for increasing k; not thread-safe (the cache is mutable).
  uint64_t at(uint64_t k) const;

 private:
  uint64_t n_;
  uint64_t seed_;
  bool shuffle_;
  mutable uint64_t cached_epoch_ = UINT64_MAX;
  mutable std::vector<uint64_t> perm_;  // permutation of epoch cached_epoch_
};

}  // namespace mpitrain
