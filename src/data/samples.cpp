#include "mpitrain/data/samples.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
#include <utility>
#include <vector>

#include "mpitrain/backend/unscored.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {

namespace {

// splitmix64's finaliser: a bijective 64-bit mix whose every output bit depends on every input bit.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

SampleWindows::SampleWindows(const TokenSource& src, int seq_len) : src_(src), seq_len_(seq_len) {
  if (seq_len <= 0) MPITRAIN_THROW("SampleWindows: seq_len " + std::to_string(seq_len));
  const auto window = static_cast<uint64_t>(seq_len) + 1;
  require(src.size() >= window,
          "'" + src.path() + "' has " + std::to_string(src.size()) +
              " tokens, fewer than one sample of seq_len+1 = " + std::to_string(window));
  count_ = (src.size() - 1) / static_cast<uint64_t>(seq_len);
}

void SampleWindows::read(uint64_t sample, int32_t* inputs, int32_t* targets) const {
  if (sample >= count_)
    MPITRAIN_THROW("sample " + std::to_string(sample) + " of '" + src_.path() +
                   "' is out of range (" + std::to_string(count_) + " samples)");
  const auto t = static_cast<uint64_t>(seq_len_);
  std::vector<int32_t> window(t + 1);  // one read of tokens [iT, iT+T+1)
  src_.read(sample * t, t + 1, window.data());
  std::copy(window.begin(), window.end() - 1, inputs);
  std::copy(window.begin() + 1, window.end(), targets);
  if (!src_.has_loss_mask()) return;
  std::vector<uint8_t> scored(t);  // the targets' mask bytes [iT+1, iT+T+1)
  src_.read_loss_mask(sample * t + 1, t, scored.data());
  for (uint64_t i = 0; i < t; ++i)
    if (scored[i] == 0) targets[i] = kUnscored;
}

Corpus::Corpus(const std::vector<const TokenSource*>& files, int seq_len) : first_{0} {
  if (files.empty()) MPITRAIN_THROW("Corpus: no files");
  for (const TokenSource* f : files) {
    windows_.emplace_back(*f, seq_len);
    first_.push_back(first_.back() + windows_.back().count());
  }
}

void Corpus::read(uint64_t sample, int32_t* inputs, int32_t* targets) const {
  if (sample >= count())
    MPITRAIN_THROW("sample " + std::to_string(sample) + " is out of range (" +
                   std::to_string(count()) + " samples in " + std::to_string(windows_.size()) +
                   " files)");
  const size_t f = std::upper_bound(first_.begin(), first_.end(), sample) - first_.begin() - 1;
  windows_[f].read(sample - first_[f], inputs, targets);
}

SampleOrder::SampleOrder(uint64_t n_samples, uint64_t seed, bool shuffle, uint64_t stream)
    : n_(n_samples), seed_(seed), shuffle_(shuffle), stream_(stream) {
  if (n_ == 0) MPITRAIN_THROW("SampleOrder: no samples");
}

uint64_t SampleOrder::at(uint64_t k) const {
  const uint64_t epoch = k / n_, i = k % n_;
  if (!shuffle_ || n_ == 1) return i;
  Rng rng(seed_, stream_ + epoch);
  if (n_ <= kStoredPermutationMax) {  // Fisher–Yates, exactly uniform; kept for the epoch
    if (epoch != cached_epoch_) {
      perm_.resize(n_);
      std::iota(perm_.begin(), perm_.end(), uint64_t{0});
      for (uint64_t j = n_ - 1; j > 0; --j) std::swap(perm_[j], perm_[rng.below(j + 1)]);
      cached_epoch_ = epoch;
    }
    return perm_[i];
  }
  // A 6-round Feistel network on the 2h-bit words (the smallest even width with 2^2h >= n, so
  // fewer than 4n words), its round keys from the epoch's stream. Walking the cycle of i until
  // it lands below n gives a bijection of [0, n) (fewer than 4 steps on average).
  uint64_t keys[6];
  for (uint64_t& key : keys) key = rng.next_u64();
  const int h = (std::bit_width(n_ - 1) + 1) / 2;
  const uint64_t mask = (uint64_t{1} << h) - 1;
  uint64_t x = i;
  do {
    uint64_t left = x >> h, right = x & mask;
    for (const uint64_t key : keys) {
      const uint64_t next = left ^ (mix64(right ^ key) & mask);
      left = right;
      right = next;
    }
    x = (left << h) | right;
  } while (x >= n_);
  return x;
}

}  // namespace mpitrain
