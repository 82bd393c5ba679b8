#include "mpitrain/data/blend.hpp"

#include <algorithm>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

BlendOrder::BlendOrder(std::vector<double> weights)
    : weights_(std::move(weights)), counts_(weights_.size(), 0) {
  if (weights_.empty()) MPITRAIN_THROW("BlendOrder: no components");
}

BlendPick BlendOrder::at(uint64_t k) {
  if (k < next_) {  // backwards: start over
    next_ = 0;
    std::fill(counts_.begin(), counts_.end(), 0);
  }
  for (;; ++next_) {
    size_t best = 0;
    double best_need = -1e300;
    for (size_t i = 0; i < weights_.size(); ++i) {
      const double need =
          weights_[i] * static_cast<double>(next_ + 1) - static_cast<double>(counts_[i]);
      if (need > best_need) best = i, best_need = need;
    }
    if (next_ == k) return {best, counts_[best]};
    ++counts_[best];
  }
}

}  // namespace mpitrain
