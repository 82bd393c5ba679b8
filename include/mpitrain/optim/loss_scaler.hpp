// Dynamic loss scaling for fp16, with PyTorch GradScaler's semantics.
//
// The loss gradient is multiplied by scale() before backward so that small gradients survive
// fp16's range; the optimizer divides it out again. After a step whose gradients hold an inf or
// NaN on any rank (the caller agrees on that over the world), the step is skipped and the scale
// halved (never below min_scale); after `window` consecutive clean steps it doubles.
// Disabled (fp32, bf16): scale 1; update() only reports !overflow and counts nothing — there a
// non-finite gradient is a fault for the trainer's --on-nan policy, not a routine event.
#pragma once

#include <cstdint>

namespace mpitrain {

struct LossScalerConfig {
  bool enabled = false;
  double initial_scale = 65536.0;  // 2^16
  int window = 2000;               // clean steps before the scale doubles
  double min_scale = 1.0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& config);

  bool enabled() const { return config_.enabled; }
  double scale() const { return scale_; }
  int64_t clean_steps() const { return clean_steps_; }  // since the last overflow or growth
  int64_t skipped_steps() const { return skipped_; }    // overflow steps of the whole run

  // After the gradients of a step are known: returns true if the optimizer may step (no
  // overflow), and moves the scale for the next step.
  bool update(bool overflow);
  // From a checkpoint.
  void restore(double scale, int64_t clean_steps, int64_t skipped_steps);

 private:
  LossScalerConfig config_;
  double scale_;
  int64_t clean_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace mpitrain
