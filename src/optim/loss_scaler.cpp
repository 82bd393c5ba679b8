#include "mpitrain/optim/loss_scaler.hpp"

#include <algorithm>

namespace mpitrain {

LossScaler::LossScaler(const LossScalerConfig& config)
    : config_(config), scale_(config.enabled ? config.initial_scale : 1.0) {}

bool LossScaler::update(bool overflow) {
  if (!config_.enabled) return !overflow;
  if (overflow) {
    scale_ = std::max(config_.min_scale, scale_ * 0.5);
    clean_steps_ = 0;
    ++skipped_;
    return false;
  }
  if (++clean_steps_ >= config_.window) {
    scale_ *= 2.0;
    clean_steps_ = 0;
  }
  return true;
}

void LossScaler::restore(double scale, int64_t clean_steps, int64_t skipped_steps) {
  scale_ = config_.enabled ? scale : 1.0;
  clean_steps_ = clean_steps;
  skipped_ = skipped_steps;
}

}  // namespace mpitrain
