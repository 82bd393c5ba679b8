// Learning rate per step: linear warm-up from 0, then decay to min_lr over the remaining steps,
// or (warmup-stable-decay) max_lr held until a decay over the last steps.
#pragma once

#include <cstdint>
#include <string>

namespace mpitrain {

enum class LrDecay { Cosine, Linear, Constant, Wsd };
// The shape of WSD's decay over its progress q in (0, 1] (Megatron-LM's lr-wsd-decay-style,
// torchtitan's decay_type): linear 1 - q; cosine (1 + cos(pi q)) / 2; sqrt 1 - sqrt(q)
// (Megatron's minus_sqrt); exponential 2 * 0.5^q - 1.
enum class WsdDecay { Linear, Cosine, Sqrt, Exponential };

LrDecay parse_lr_decay(const std::string& name);  // "cosine" | "linear" | "constant" | "wsd"
std::string to_string(LrDecay decay);
WsdDecay parse_wsd_decay(const std::string& name);  // "linear" | "cosine" | "sqrt" | "exponential"

struct LrSchedule {
  LrDecay decay = LrDecay::Cosine;
  double max_lr = 3e-4;
  double min_lr = 3e-5;
  int warmup_steps = 0;
  int total_steps = 1;
  int wsd_decay_steps = 0;  // Wsd: the last steps, over which the lr decays
  WsdDecay wsd_decay = WsdDecay::Linear;

  // step counts from 0. Warm-up: max_lr * (step+1)/warmup. Then with progress p in [0,1]:
  // cosine: min + (max-min)(1+cos(pi p))/2; linear: max - (max-min) p; constant: max.
  // wsd: max up to step total - 1 - D (D = wsd_decay_steps), then min + (max-min) shape(q) with
  // q = (step - (total - 1 - D)) / D: the last step reaches min (as the others do).
  double at(int step) const;
  // UsageError where a WSD decay of wsd_decay_steps does not fit after the warm-up in
  // total_steps (Megatron-LM asserts the same).
  void check() const;
};

// On a resume at step `at` of a checkpoint whose schedule was `recorded` steps long (0: not
// recorded, a checkpoint from before the field), s keeps that length unless decay_steps
// (--lr-decay-steps, 0 = not given) sets another; a checkpoint that records none: steps (this
// run's --steps). Returns a line for start-up when the length is not this run's --steps or not
// the recorded one (the lr of the next step both ways), "" otherwise.
std::string resume_schedule(LrSchedule& s, int decay_steps, int steps, int64_t recorded,
                            int64_t at);

}  // namespace mpitrain
