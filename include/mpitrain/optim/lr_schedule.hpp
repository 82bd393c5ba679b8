// Learning rate per step: linear warm-up from 0, then decay to min_lr over the remaining steps.
#pragma once

#include <cstdint>
#include <string>

namespace mpitrain {

enum class LrDecay { Cosine, Linear, Constant };

LrDecay parse_lr_decay(const std::string& name);  // "cosine" | "linear" | "constant"
std::string to_string(LrDecay decay);

struct LrSchedule {
  LrDecay decay = LrDecay::Cosine;
  double max_lr = 3e-4;
  double min_lr = 3e-5;
  int warmup_steps = 0;
  int total_steps = 1;

  // step counts from 0. Warm-up: max_lr * (step+1)/warmup. Then with progress p in [0,1]:
  // cosine: min + (max-min)(1+cos(pi p))/2; linear: max - (max-min) p; constant: max.
  double at(int step) const;
};

// On a resume at step `at` of a checkpoint whose schedule was `recorded` steps long (0: not
// recorded, a checkpoint from before the field), s keeps that length unless decay_steps
// (--lr-decay-steps, 0 = not given) sets another; a checkpoint that records none: steps (this
// run's --steps). Returns a line for start-up when the length is not this run's --steps or not
// the recorded one (the lr of the next step both ways), "" otherwise.
std::string resume_schedule(LrSchedule& s, int decay_steps, int steps, int64_t recorded,
                            int64_t at);

}  // namespace mpitrain
