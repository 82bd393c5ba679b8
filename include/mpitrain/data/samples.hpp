// Training samples and their one global order.
#pragma once

#include <cstdint>
#include <vector>

#include "mpitrain/data/token_source.hpp"
#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {

// Training samples are windows of seq_len+1 tokens with stride seq_len (as llm.c):
// sample i = tokens [i*T, i*T+T+1); inputs = its first T tokens, targets = its last T.
class SampleWindows {
 public:
  // UsageError (naming the file, its token count and T+1) if fewer than seq_len+1 tokens.
  SampleWindows(const TokenSource& src, int seq_len);  // src must outlive this
  uint64_t count() const { return count_; }            // (size-1)/seq_len
  int seq_len() const { return seq_len_; }
  // inputs[t] = token i*T+t, targets[t] = token i*T+t+1, t < T, or kUnscored where the file's
  // loss mask (TokenSource::has_loss_mask) is 0 for token i*T+t+1; Error if sample >= count().
  void read(uint64_t sample, int32_t* inputs, int32_t* targets) const;

 private:
  const TokenSource& src_;
  int seq_len_;
  uint64_t count_;
};

// Files concatenated into one sample space: file f's windows follow file f-1's, and no sample
// crosses a file boundary (each file has its own SampleWindows).
class Corpus {
 public:
  // UsageError as SampleWindows for a file shorter than one sample; the sources must outlive this.
  Corpus(const std::vector<const TokenSource*>& files, int seq_len);
  uint64_t count() const { return first_.back(); }  // the files' samples, summed
  int seq_len() const { return windows_.front().seq_len(); }
  // Sample `sample` of the concatenation, as SampleWindows::read.
  void read(uint64_t sample, int32_t* inputs, int32_t* targets) const;

 private:
  std::vector<SampleWindows> windows_;  // one per file
  std::vector<uint64_t> first_;         // first_[f]: file f's first sample; back(): count
};

// The one order of a sample space: the k-th sample of the stream, epochs concatenated
// (epoch = k / n). With shuffle, each epoch is a permutation drawn from Rng(seed, stream +
// epoch), so the sequence does not depend on the number of ranks or on how it is queried:
// up to kStoredPermutationMax samples a Fisher–Yates shuffle, kept for the current epoch (at
// most 8 MiB); above, a seeded Feistel network computed per query (samples.cpp): no memory and
// no start-up cost that grows with the dataset. Without shuffle, k % n.
class SampleOrder {
 public:
  // n_samples > 0; stream: the first of this order's Rng streams (runtime/rng.hpp).
  SampleOrder(uint64_t n_samples, uint64_t seed, bool shuffle,
              uint64_t stream = rng_stream::kDataOrder);
  uint64_t n_samples() const { return n_; }
  static constexpr uint64_t kStoredPermutationMax = uint64_t{1} << 20;
  // The sample index at stream position k: O(1) amortised for increasing k. Not thread-safe
  // (the stored permutation is a cache).
  uint64_t at(uint64_t k) const;

 private:
  uint64_t n_;
  uint64_t seed_;
  bool shuffle_;
  uint64_t stream_;
  mutable uint64_t cached_epoch_ = UINT64_MAX;
  mutable std::vector<uint64_t> perm_;  // the permutation of epoch cached_epoch_
};

}  // namespace mpitrain
