// The model and run a plan is for, read from the trainer's own INI file with the trainer's own
// parser (app/options.hpp: same names, defaults and checks), planner flags overriding the file.
#pragma once

#include <string>

#include "mpitrain/model/config.hpp"
#include "mpitrain/planner/memory.hpp"
#include "mpitrain/train/train_config.hpp"

namespace mpitrain {

// Planner flags that override the INI; 0 / "" = keep the file's value (or the trainer default).
struct RunOverrides {
  int seq_len = 0;
  int global_batch = 0;
  int vocab_size = 0;
  std::string precision;
};

struct PlanInput {
  ModelConfig model;  // complete: nothing left to derive from data
  RunShape run;
  int cp = 0;  // the file's cp when it sets one (the search is pinned to it); 0 = searched
};

// Fields the trainer derives from its data or the sequence length are completed as it does
// (n-kv-head = n-head, d-ff by the architecture's rule, max-seq-len = seq-len); the vocabulary,
// which comes from the data, must be in the file or given (UsageError otherwise).
PlanInput read_plan_input(const std::string& config_path, const RunOverrides& overrides, bool gpu);

// The trainer's options as the planner's run (gpu: tensors in their own width, not floats).
RunShape run_shape_of(const TrainConfig& t, bool gpu);

}  // namespace mpitrain
