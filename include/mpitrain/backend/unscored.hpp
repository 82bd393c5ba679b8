// A target that is not scored: its row adds no loss and has a zero gradient in the cross-entropy
// ops (backend.hpp; PyTorch's ignore_index). --mask-boundary-loss sets it (data/loss_mask.hpp).
#pragma once

#include <cstdint>

namespace mpitrain {

inline constexpr int32_t kUnscored = -1;

}  // namespace mpitrain
