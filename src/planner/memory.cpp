#include "mpitrain/planner/memory.hpp"

#include <algorithm>

#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/train/gather.hpp"

namespace mpitrain {

size_t activation_elements(const ModelConfig& c, const ModelShard& s, int B, int T, int slots,
                           Recompute recompute) {
  const size_t tp = s.tp, N = static_cast<size_t>(B) * T, C = c.d_model, hs = c.head_size();
  const size_t NH = c.n_head / tp, NKV = c.n_kv_head / tp, F = c.d_ff / tp;
  const size_t Vl = c.padded_vocab() / tp, NC = N * C;
  const size_t QKV = (NH + 2 * NKV) * hs, A = NH * hs, FC = c.arch == Arch::Llama ? 2 * F : F;
  const size_t P = static_cast<size_t>(B) * NH * T * T;
  const size_t L = (s.layer_end < 0 ? c.n_layer : s.layer_end) - s.layer_begin;  // -1 = all
  const size_t block = 5 * NC + 4 * N + N * QKV + N * A + N * FC + N * F;
  const size_t kept = recompute == Recompute::Full        ? NC
                      : recompute == Recompute::Selective ? block + NC
                                                          : block + NC + P;
  const size_t shared = recompute == Recompute::Full        ? block + P
                        : recompute == Recompute::Selective ? P
                                                            : 0;
  const size_t head = s.last_stage ? NC + 2 * N + N * Vl : 0;
  const size_t slot = NC + L * kept + head;
  const size_t scratch = 2 * NC + N * QKV + N * A + P + N * FC + N * F + 4 * N;
  return shared + slots * slot + scratch;
}

int micro_batches(const RunShape& run, const Layout& layout) {
  return run.global_batch / (layout.dp * layout.micro_batch);
}

MemoryEstimate stage_memory(const ModelConfig& config, const RunShape& run, const Layout& layout,
                            const std::vector<int>& stage_first_layer, int stage,
                            double baseline_bytes) {
  const GridShape grid{layout.dp, layout.tp, layout.pp};
  const ModelShard shard = shard_of(grid, stage_first_layer, 0, stage);
  const double n = static_cast<double>(ParamLayout(config, shard).total());
  const bool low = run.precision != Precision::Fp32;
  const double w = run.gpu && low ? 2.0 : 4.0;  // bytes of a compute-precision element
  // Elements of the optimizer state held here: ZeRO-1's largest piece (grad_sync.hpp), or all.
  const FlatRange own = zero_range(static_cast<size_t>(n), layout.zero ? layout.dp : 1, 0);
  const double sharded = static_cast<double>(own.hi - own.lo);
  const int m = micro_batches(run, layout);
  const int slots = pipeline_slots(run.schedule, m, layout.pp, stage);
  const double rows = static_cast<double>(layout.micro_batch) * run.seq_len;

  MemoryEstimate e;
  e.params = n * w;
  e.grads = n * w;
  e.optimizer = 4.0 * run.optimizer_states * sharded;
  e.master = low ? 4.0 * sharded : 0.0;
  e.activations =
      w * static_cast<double>(activation_elements(config, shard, layout.micro_batch, run.seq_len,
                                                  slots, layout.recompute));
  if (layout.pp > 1) e.buffers += slots * rows * config.d_model * w;  // input-gradient copies
  if (!run.gpu) {
    e.buffers += 4.0 * 2 * (m + 1) * rows;  // tokens and targets: the step's and the loader's
    // Open MPI's non-blocking all-reduce works on a copy of the bucket it is given (measured:
    // one bucket's worth at the peak, the buckets overlapping little).
    if (layout.dp > 1) e.buffers += std::min(n * 4.0, run.bucket_mb * (1 << 20));
  }
  e.baseline = baseline_bytes;
  return e;
}

MemoryEstimate layout_memory(const ModelConfig& config, const RunShape& run, const Layout& layout,
                             double baseline_bytes) {
  const std::vector<int> first = pipeline_layer_split(config.n_layer, layout.pp, "");
  MemoryEstimate worst;
  for (int s = 0; s < layout.pp; ++s) {
    const MemoryEstimate e = stage_memory(config, run, layout, first, s, baseline_bytes);
    if (s == 0 || e.total() > worst.total()) worst = e;
  }
  return worst;
}

}  // namespace mpitrain
