#include "mpitrain/planner/planner.hpp"

#include <algorithm>
#include <cstdio>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/run_setup.hpp"

namespace mpitrain {

namespace {

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", bytes / (1u << 30));
  return buf;
}

// Why grid (dp, tp, pp, cp) cannot run this model and batch at all; "" if it can.
std::string grid_problem(const ModelConfig& config, const RunShape& run, const Cluster& cluster,
                         int dp, int tp, int pp, int cp) {
  if (cluster.ranks_per_node % tp != 0)
    return "tp " + std::to_string(tp) + " does not divide the " +
           std::to_string(cluster.ranks_per_node) + " ranks of a node (a tp group stays in one node)";
  if (std::string why = layout_problem(config, tp, pp, ""); !why.empty()) return why;
  if (run.global_batch % dp != 0)
    return "global batch " + std::to_string(run.global_batch) + " is not divisible by dp " +
           std::to_string(dp);
  if (run.seq_len % (2 * cp) != 0)  // context_chunks.hpp: 2 cp chunks of each sequence
    return "seq-len " + std::to_string(run.seq_len) + " is not divisible by 2 x cp (" +
           std::to_string(2 * cp) + " chunks)";
  return "";
}

}  // namespace

Plan make_plan(const ModelConfig& config, const RunShape& run, const Cluster& cluster,
               const Calibration& calibration, const SearchLimits& limits) {
  Plan plan;
  plan.rank_bytes = cluster.mem_bytes;
  plan.usable_bytes = usable_memory(cluster.mem_bytes, calibration.baseline_bytes);
  const int world = cluster.world();
  const double flops_per_token = model_flops_per_token(config, run.seq_len);
  for (int cp : divisors(world)) {
    for (int tp : divisors(world / cp)) {
      for (int pp : divisors(world / (cp * tp))) {
        const int dp = world / (tp * pp * cp);
        if ((limits.dp && dp != limits.dp) || (limits.tp && tp != limits.tp) ||
            (limits.pp && pp != limits.pp) || (limits.cp && cp != limits.cp))
          continue;
        if (std::string why = grid_problem(config, run, cluster, dp, tp, pp, cp); !why.empty()) {
          plan.rejected.push_back({dp, tp, pp, why, cp});
          continue;
        }
        const int grad_ranks = dp * cp;  // ZeRO shards over the gradients' dp x cp group
        std::vector<Layout> options;
        bool any_micro_batch = false;
        for (int mb : divisors(run.global_batch / dp)) {
          if (mb > limits.max_micro_batch || (limits.micro_batch && mb != limits.micro_batch))
            continue;
          any_micro_batch = true;
          for (int zero = 0; zero <= 3; ++zero) {
            if ((zero > 0 && grad_ranks == 1) || (limits.zero && *limits.zero != zero)) continue;
            if (zero >= 2 && limits.zero_shard && grad_ranks % limits.zero_shard != 0) continue;
            const int shard = zero >= 2 && limits.zero_shard < grad_ranks ? limits.zero_shard : 0;
            for (bool reshard : {true, false}) {
              if (!reshard && zero != 3) continue;  // ZeRO-3's choice only
              if (zero == 3 && limits.reshard_after_forward &&
                  *limits.reshard_after_forward != reshard)
                continue;
              for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full})
                for (bool sp : {false, true})  // sequence parallelism: tp > 1, T/cp divisible by tp
                  if ((!limits.recompute || *limits.recompute == rc) &&
                      (!sp || (tp > 1 && run.seq_len / cp % tp == 0)) &&
                      (!limits.sequence_parallel || *limits.sequence_parallel == sp))
                    options.push_back({dp, tp, pp, mb, zero, rc, reshard, shard, sp, cp});
            }
          }
        }
        if (options.empty()) {
          const bool no_sp = limits.sequence_parallel && *limits.sequence_parallel &&
                             !(tp > 1 && run.seq_len / cp % tp == 0);
          plan.rejected.push_back(
              {dp, tp, pp,
               !any_micro_batch
                   ? "global batch " + std::to_string(run.global_batch) + " / dp " +
                         std::to_string(dp) +
                         " has no micro-batch size allowed here (micro-batch-size, max-micro-batch)"
               : no_sp ? "sequence-parallel needs tp > 1 dividing seq-len / cp (" +
                             std::to_string(run.seq_len / cp) + ")"
               : grad_ranks == 1 ? "zero " + std::to_string(*limits.zero) + " needs dp > 1"
                                 : "zero-shard-size " + std::to_string(limits.zero_shard) +
                                       " does not divide dp " + std::to_string(dp) +
                                       (cp > 1 ? " x cp " + std::to_string(cp) : ""),
               cp});
          continue;
        }
        const Layout* smallest = nullptr;
        double smallest_bytes = 0;
        bool any = false;
        for (const Layout& layout : options) {
          const MemoryEstimate mem = layout_memory(config, run, layout, calibration.baseline_bytes);
          if (mem.total() > plan.usable_bytes) {
            if (!smallest || mem.total() < smallest_bytes)
              smallest = &layout, smallest_bytes = mem.total();
            continue;
          }
          Candidate c{layout, mem, estimate_time(config, run, layout, cluster, calibration)};
          c.tokens_per_s = static_cast<double>(run.global_batch) * run.seq_len / c.time.step;
          c.mfu = flops_per_token * c.tokens_per_s / (cluster.peak_flops * world);
          plan.fits.push_back(c);
          any = true;
        }
        if (!any)
          plan.rejected.push_back({dp, tp, pp,
                                   "memory: at least " + gib(smallest_bytes) + " per rank (mb " +
                                       std::to_string(smallest->micro_batch) + ", zero " +
                                       zero_label(*smallest) + ", recompute " +
                                       to_string(smallest->recompute) + ") > " +
                                       gib(plan.usable_bytes) + " usable",
                                   cp});
      }
    }
  }
  std::stable_sort(plan.fits.begin(), plan.fits.end(), [](const Candidate& a, const Candidate& b) {
    if (a.time.step != b.time.step) return a.time.step < b.time.step;
    return a.memory.total() < b.memory.total();
  });
  return plan;
}

}  // namespace mpitrain
