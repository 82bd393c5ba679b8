#include "mpitrain/planner/micro_batch_auto.hpp"

#include <cstdio>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// GiB from 1 GiB up, MiB below (tiny test models).
std::string gib(double bytes) {
  char text[32];
  if (bytes >= (1 << 30)) std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1 << 30));
  else std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1 << 20));
  return text;
}

std::string breakdown(const MemoryEstimate& e) {
  return "params " + gib(e.params) + ", grads " + gib(e.grads) + ", optimizer " +
         gib(e.optimizer) + ", master " + gib(e.master) + ", activations " +
         gib(e.activations) + ", buffers " + gib(e.buffers);
}

}  // namespace

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
                gib(free_bytes).c_str(), 100 * margin, gib(usable).c_str());
  MicroBatchPlan plan;
  plan.text = head;
  for (int b = per_rank; b >= 1; --b) {
    if (per_rank % b != 0) continue;
    layout.micro_batch = b;
    const MemoryEstimate e = layout_memory(config, run, layout, 0.0);
    plan.memory = e;
    const std::string mb = "; mb " + std::to_string(b) + ": " + gib(e.total());
    if (e.total() <= usable) {
      plan.micro_batch = b;
      plan.text += mb + " (" + breakdown(e) + ") fits -> micro-batch " + std::to_string(b);
      return plan;
    }
    plan.text += mb + ", too large";
  }
  plan.text += " (" + breakdown(plan.memory) + ") -> none fits";
  return plan;
}

}  // namespace mpitrain
