#include "mpitrain/optim/lr_schedule.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numbers>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

LrDecay parse_lr_decay(const std::string& name) {
  if (name == "cosine") return LrDecay::Cosine;
  if (name == "linear") return LrDecay::Linear;
  if (name == "constant") return LrDecay::Constant;
  if (name == "wsd") return LrDecay::Wsd;
  throw UsageError("lr-schedule must be 'cosine', 'linear', 'constant' or 'wsd', not '" + name +
                   "'");
}

WsdDecay parse_wsd_decay(const std::string& name) {
  if (name == "linear") return WsdDecay::Linear;
  if (name == "cosine") return WsdDecay::Cosine;
  if (name == "sqrt") return WsdDecay::Sqrt;
  if (name == "exponential") return WsdDecay::Exponential;
  throw UsageError("lr-wsd-decay-style must be 'linear', 'cosine', 'sqrt' or 'exponential', not '" +
                   name + "'");
}

std::string to_string(LrDecay decay) {
  switch (decay) {
    case LrDecay::Cosine: return "cosine";
    case LrDecay::Linear: return "linear";
    case LrDecay::Constant: return "constant";
    case LrDecay::Wsd: return "wsd";
  }
  return "?";
}

namespace {
// WSD's lr as a fraction of the way from min to max, at decay progress q in (0, 1].
double wsd_coefficient(WsdDecay shape, double q) {
  switch (shape) {
    case WsdDecay::Linear: return 1.0 - q;
    case WsdDecay::Cosine: return 0.5 * (1.0 + std::cos(std::numbers::pi * q));
    case WsdDecay::Sqrt: return 1.0 - std::sqrt(q);
    case WsdDecay::Exponential: return 2.0 * std::pow(0.5, q) - 1.0;
  }
  return 1.0;
}
}  // namespace

double LrSchedule::at(int step) const {
  if (step < warmup_steps) return max_lr * (step + 1) / warmup_steps;
  if (decay == LrDecay::Constant) return max_lr;
  if (decay == LrDecay::Wsd) {
    const int stable_end = total_steps - 1 - wsd_decay_steps;  // the last step at max_lr
    if (step <= stable_end) return max_lr;
    const double q = std::min(1.0, static_cast<double>(step - stable_end) / wsd_decay_steps);
    return min_lr + (max_lr - min_lr) * wsd_coefficient(wsd_decay, q);
  }
  const int span = std::max(1, total_steps - warmup_steps - 1);
  const double p = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  if (decay == LrDecay::Linear) return max_lr - (max_lr - min_lr) * p;
  return min_lr + (max_lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
}

void LrSchedule::check() const {
  if (decay != LrDecay::Wsd) return;
  if (wsd_decay_steps < 1)
    throw UsageError("lr-schedule wsd decays over the last lr-wsd-decay-steps steps: give them "
                     "(Megatron-LM's lr-wsd-decay-iters)");
  if (wsd_decay_steps > total_steps - warmup_steps)
    throw UsageError("lr-wsd-decay-steps " + std::to_string(wsd_decay_steps) +
                     " does not fit after warmup-steps " + std::to_string(warmup_steps) +
                     " in the schedule's " + std::to_string(total_steps) +
                     " steps: the decay starts after the warm-up");
}

std::string resume_schedule(LrSchedule& s, int decay_steps, int steps, int64_t recorded,
                            int64_t at) {
  const int next = static_cast<int>(at);
  s.total_steps = decay_steps > 0 ? decay_steps : recorded > 0 ? static_cast<int>(recorded) : steps;
  if (s.decay == LrDecay::Constant || (recorded == 0 && decay_steps == 0)) return "";
  const auto lr_over = [&](int length) {
    LrSchedule other = s;
    other.total_steps = length;
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", other.at(next));
    return std::string(text);
  };
  const std::string first = "lr schedule at step " + std::to_string(next + 1) + ": ";
  if (decay_steps > 0) {
    if (recorded == 0 || recorded == decay_steps) return "";
    return first + "--lr-decay-steps " + std::to_string(decay_steps) +
           " replaces the checkpoint's " + std::to_string(recorded) + "-step decay: lr " +
           lr_over(decay_steps) + " (" + lr_over(static_cast<int>(recorded)) + " over " +
           std::to_string(recorded) + ")";
  }
  if (recorded == steps) return "";
  return first + "decays over the " + std::to_string(recorded) +
         " steps of the run that started it, not this run's --steps " + std::to_string(steps) +
         ": lr " + lr_over(s.total_steps) + " (" + lr_over(steps) + " over " +
         std::to_string(steps) + "); --lr-decay-steps " + std::to_string(steps) + " to change it";
}

}  // namespace mpitrain
