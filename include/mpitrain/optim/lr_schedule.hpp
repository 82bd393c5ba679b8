// Learning rate per step: linear warm-up from 0, then decay to min_lr over the remaining steps.
#pragma once

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

}  // namespace mpitrain
