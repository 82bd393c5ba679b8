#include "mpitrain/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "cosine") return LrDecay::Cosine;
  if (name == "linear") return LrDecay::Linear;
  if (name == "constant") return LrDecay::Constant;
  throw UsageError("lr-schedule must be 'cosine', 'linear' or 'constant', not '" + name + "'");
}

std::string to_string(LrDecay decay) {
  switch (decay) {
    case LrDecay::Cosine: return "cosine";
    case LrDecay::Linear: return "linear";
    case LrDecay::Constant: return "constant";
  }
  return "?";
}

double LrSchedule::at(int step) const {
  if (step < warmup_steps) return max_lr * (step + 1) / warmup_steps;
  if (decay == LrDecay::Constant) return max_lr;
  const int span = std::max(1, total_steps - warmup_steps - 1);
  const double p = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  if (decay == LrDecay::Linear) return max_lr - (max_lr - min_lr) * p;
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace mpitrain
