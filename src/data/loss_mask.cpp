#include "mpitrain/data/loss_mask.hpp"

#include <algorithm>

namespace mpitrain {

void unscore_after_boundary(int32_t boundary, const int32_t* tokens, int32_t* targets, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (tokens[i] == boundary) targets[i] = kUnscored;
}

size_t scored_targets(const int32_t* targets, size_t n) {
  return static_cast<size_t>(n - std::count(targets, targets + n, kUnscored));
}

}  // namespace mpitrain
