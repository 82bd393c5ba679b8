#include "mpitrain/planner/memory_fit.hpp"

#include <cmath>
#include <cstdio>

#include "mpitrain/planner/micro_batch_auto.hpp"

namespace mpitrain {

namespace {

// The largest stage's estimate and its index.
MemoryEstimate worst_stage(const ModelConfig& config, const RunShape& run, const Layout& layout,
                           const std::vector<int>& stage_first_layer, int* stage) {
  MemoryEstimate worst;
  for (int s = 0; s < layout.pp; ++s) {
    const MemoryEstimate e = stage_memory(config, run, layout, stage_first_layer, s, 0.0);
    if (s == 0 || e.total() > worst.total()) worst = e, *stage = s;
  }
  return worst;
}

}  // namespace

std::string memory_misfit(const ModelConfig& config, const RunShape& run, Layout layout,
                          const std::vector<int>& stage_first_layer, double bytes,
                          const std::string& budget) {
  const bool automatic = layout.micro_batch == 0;
  if (automatic) layout.micro_batch = 1;
  int stage = 0;
  const MemoryEstimate need = worst_stage(config, run, layout, stage_first_layer, &stage);
  if (need.total() <= bytes) return "";
  std::string text = "the model does not fit in memory: ";
  if (automatic) text += "micro-batch-size auto: none fits; ";
  text += (layout.pp > 1 ? "pipeline stage " + std::to_string(stage) + " needs " : "it needs ") +
          memory_text(need.total()) + " per rank at micro-batch " +
          std::to_string(layout.micro_batch) + " (" + memory_breakdown(need) + "), a rank has " +
          memory_text(bytes) + " (" + budget + ")";
  const MicroBatchPlan smaller = plan_micro_batch(config, run, layout, bytes, 0.0);
  if (smaller.micro_batch > 0 && smaller.micro_batch < layout.micro_batch) {
    text += "; --micro-batch-size " + std::to_string(smaller.micro_batch) + " fits (" +
            memory_text(smaller.memory.total()) + ")";
  } else {
    Layout one = layout;
    one.micro_batch = 1;
    const double least = worst_stage(config, run, one, stage_first_layer, &stage).total();
    char times[32];
    std::snprintf(times, sizeof times, "%.3g", std::ceil(least / bytes));
    text += "; even micro-batch 1 needs " + memory_text(least) + ", about " + times +
            " times that: a smaller model or seq-len, or that many times the tp x pp ranks (now " +
            std::to_string(layout.tp) + " x " + std::to_string(layout.pp) + ")";
  }
  return text + "; --device-memory-gib sets the memory per rank to plan for, if you know better";
}

}  // namespace mpitrain
