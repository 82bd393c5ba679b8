// A model's shape in words, for the trainer's start-up line and the planner: the experts of a
// mixture-of-experts model and the parameters a token uses.
#pragma once

#include <string>

#include "mpitrain/model/config.hpp"

namespace mpitrain {

// "MoE E8 K2 Fe1024 shared 1 every 2" (experts, top-k, expert width, shared experts, an MoE layer
// every n); "" for a dense model.
std::string experts_text(const ModelConfig& config);

// Parameters of the whole model a token passes through: all but the routed experts it is not
// sent to (of each MoE layer's n_experts, top_k); the total for a dense model.
double active_params(const ModelConfig& config);

}  // namespace mpitrain
