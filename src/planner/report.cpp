#include "mpitrain/planner/report.hpp"

#include <algorithm>

namespace mpitrain {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// "ZeRO-3 (reshard after forward), shard groups of 8" for the best layout's line.
std::string zero_text(const Layout& l) {
  std::string text = l.zero == 0 ? "ZeRO off" : "ZeRO-" + std::to_string(l.zero);
  if (l.zero == 3)
    text += l.reshard_after_forward ? " (reshard after forward)" : " (kept gathered)";
  if (l.zero >= 2 && l.zero_shard > 0) text += ", shard groups of " + std::to_string(l.zero_shard);
  return text;
}

}  // namespace

std::string layout_name(const Layout& l) {
  return "dp" + std::to_string(l.dp) + " tp" + std::to_string(l.tp) + " pp" + std::to_string(l.pp) +
         " cp" + std::to_string(l.cp) + (l.sequence_parallel ? " sp" : "");
}

std::string trainer_flags(const Layout& l, const RunShape& run) {
  std::string zero = " --zero " + std::to_string(l.zero);
  if (l.zero == 3 && !l.reshard_after_forward) zero += " --zero3-reshard-after-forward false";
  if (l.zero >= 2 && l.zero_shard > 0) zero += " --zero-shard-size " + std::to_string(l.zero_shard);
  return "--dp " + std::to_string(l.dp) + " --tp " + std::to_string(l.tp) + " --pp " +
         std::to_string(l.pp) + " --cp " + std::to_string(l.cp) + " --micro-batch-size " + std::to_string(l.micro_batch) + zero +
         " --recompute " + to_string(l.recompute) + " --precision " + to_string(run.precision) +
         " --pp-schedule " + to_string(run.schedule) + " --global-batch-size " +
         std::to_string(run.global_batch) + " --seq-len " + std::to_string(run.seq_len) +
         (l.sequence_parallel ? " --sequence-parallel" : "");
}

void print_plan(std::FILE* out, const Plan& plan, const RunShape& run, int top) {
  const size_t shown = top > 0 ? std::min<size_t>(top, plan.fits.size()) : plan.fits.size();
  std::fprintf(out,
               "memory per rank %.2f GiB; a layout may hold %.2f GiB of it (its baseline and "
               "%.0f%% of the rest: the margin of --micro-batch-size auto)\n",
               plan.rank_bytes / kGiB, plan.usable_bytes / kGiB, 100 * (1 - kMemoryMargin));
  std::fprintf(out, "%4s  %-19s %4s %5s  %-9s  %10s  %11s  %8s  %14s  %10s  %6s  %10s\n", "rank",
               "layout", "mb", "zero", "recompute", "memory GiB", "est. step s", "bubble %",
               "exposed comm %", "tokens/s", "MFU %", "headroom %");
  for (size_t i = 0; i < shown; ++i) {
    const Candidate& c = plan.fits[i];
    std::fprintf(out,
                 "%4zu  %-19s %4d %5s  %-9s  %10.3f  %11.4f  %8.1f  %14.1f  %10.0f  %6.1f  %10.1f\n",
                 i + 1, layout_name(c.layout).c_str(), c.layout.micro_batch,
                 zero_label(c.layout).c_str(), to_string(c.layout.recompute).c_str(),
                 c.memory.total() / kGiB, c.time.step, 100.0 * c.time.bubble_fraction,
                 100.0 * c.time.exposed_comm_fraction, c.tokens_per_s, 100.0 * c.mfu,
                 100.0 * (1 - c.memory.total() / plan.rank_bytes));
  }
  if (shown < plan.fits.size())
    std::fprintf(out, "(%zu of %zu fitting options shown; --top 0 lists all)\n", shown,
                 plan.fits.size());
  bool kept = false;
  int groups = 0;
  for (size_t i = 0; i < shown; ++i) {
    const Layout& l = plan.fits[i].layout;
    kept |= l.zero == 3 && !l.reshard_after_forward;
    if (l.zero >= 2) groups = std::max(groups, l.zero_shard);
  }
  if (kept)
    std::fprintf(out,
                 "zero 3k: ZeRO-3 keeping the parameters it gathers for forward until "
                 "backward (--zero3-reshard-after-forward false)\n");
  if (groups > 0)
    std::fprintf(out,
                 "zero 2, 3: sharded over groups of %d dp ranks, replicated across dp / %d "
                 "(HSDP, --zero-shard-size %d)\n",
                 groups, groups, groups);
  if (!plan.fits.empty()) {
    const Candidate& b = plan.fits.front();
    const MemoryEstimate& m = b.memory;
    std::fprintf(out,
                 "best: %s, micro-batch %d, %s, recompute %s: %.2f GiB per rank = params "
                 "%.2f + grads %.2f + optimizer %.2f + master %.2f + activations %.2f + buffers "
                 "%.2f + baseline %.2f; step %.4f s = compute %.4f + bubble %.4f + tp %.4f + p2p "
                 "%.4f + cp ring exposed %.4f (of %.4f) + ep all-to-all %.4f + dp exposed %.4f + "
                 "optimizer %.4f\n",
                 layout_name(b.layout).c_str(), b.layout.micro_batch, zero_text(b.layout).c_str(),
                 to_string(b.layout.recompute).c_str(), m.total() / kGiB, m.params / kGiB,
                 m.grads / kGiB, m.optimizer / kGiB, m.master / kGiB, m.activations / kGiB,
                 m.buffers / kGiB, m.baseline / kGiB, b.time.step, b.time.compute, b.time.bubble,
                 b.time.tp_comm, b.time.p2p, b.time.cp_exposed, b.time.cp_ring, b.time.ep_comm,
                 b.time.dp_exposed,
                 b.time.optimizer);
    std::fprintf(out, "trainer flags: %s\n", trainer_flags(b.layout, run).c_str());
  }
  if (!plan.rejected.empty()) {
    std::fprintf(out, "do not fit:\n");
    for (const Rejected& r : plan.rejected) {
      Layout grid{r.dp, r.tp, r.pp};
      grid.cp = r.cp;
      std::fprintf(out, "  %-19s %s\n", layout_name(grid).c_str(), r.reason.c_str());
    }
  }
}

}  // namespace mpitrain
