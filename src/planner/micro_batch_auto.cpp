#include "mpitrain/planner/micro_batch_auto.hpp"

#include <algorithm>
#include <cstdio>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

MicroBatchPlan plan_micro_batch(const ModelConfig& config, const RunShape& run, Layout layout,
                                double free_bytes, double margin) {
  if (margin < 0 || margin >= 1)
    MPITRAIN_THROW("margin " + std::to_string(margin) + " not in [0, 1)");
  if (layout.dp < 1 || run.global_batch % layout.dp != 0)
    throw UsageError("global batch " + std::to_string(run.global_batch) +
                     " is not a multiple of dp " + std::to_string(layout.dp));
  const int per_rank = run.global_batch / layout.dp;  // sequences per dp rank per step
  const double usable = (1 - margin) * free_bytes;
  char head[128];
  std::snprintf(head, sizeof head, "micro-batch auto: %s free, %.0f%% margin -> %s usable",
                memory_text(free_bytes).c_str(), 100 * margin, memory_text(usable).c_str());
  MicroBatchPlan plan;
  plan.text = head;
  for (int b = per_rank; b >= 1; --b) {
    if (per_rank % b != 0) continue;
    layout.micro_batch = b;
    const MemoryEstimate e = layout_memory(config, run, layout, 0.0);
    plan.memory = e;
    const std::string mb = "; mb " + std::to_string(b) + ": " + memory_text(e.total());
    if (e.total() <= usable) {
      plan.micro_batch = b;
      plan.text += mb + " (" + memory_breakdown(e) + ") fits -> micro-batch " + std::to_string(b);
      return plan;
    }
    plan.text += mb + ", too large";
  }
  plan.text += " (" + memory_breakdown(plan.memory) + ") -> none fits";
  return plan;
}

double device_share(double free_bytes, int ranks, double reserved) {
  if (ranks < 1) MPITRAIN_THROW("device_share: " + std::to_string(ranks) + " ranks");
  return std::max(0.0, free_bytes / ranks - reserved);
}

}  // namespace mpitrain
