// Does a run fit? The planner's memory model (memory.hpp) of the largest pipeline stage against
// the memory one rank has, before anything is allocated: a model that cannot fit is refused with
// its plan instead of being found by the OOM killer.
#pragma once

#include <string>
#include <vector>

#include "mpitrain/model/config.hpp"
#include "mpitrain/planner/memory.hpp"

namespace mpitrain {

// "" when every stage of `layout` (split as stage_first_layer says) fits in `bytes` per rank;
// else the message: the largest stage's plan per part, the memory a rank has (`budget` says
// where that figure comes from), and what would fit — the largest micro-batch that does, or how
// many times the memory even micro-batch 1 needs. layout.micro_batch 0 (auto) is checked at 1.
std::string memory_misfit(const ModelConfig& config, const RunShape& run, Layout layout,
                          const std::vector<int>& stage_first_layer, double bytes,
                          const std::string& budget);

}  // namespace mpitrain
