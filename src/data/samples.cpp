#include "mpitrain/data/samples.hpp"

#include <algorithm>
#include <numeric>
#include <utility>
#include <vector>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {

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
  if (!shuffle_) return i;
  if (epoch != cached_epoch_) {
    perm_.resize(n_);
    std::iota(perm_.begin(), perm_.end(), uint64_t{0});
    Rng rng(seed_, stream_ + epoch);
    for (uint64_t j = n_ - 1; j > 0; --j) std::swap(perm_[j], perm_[rng.below(j + 1)]);
    cached_epoch_ = epoch;
  }
  return perm_[i];
}

}  // namespace mpitrain
