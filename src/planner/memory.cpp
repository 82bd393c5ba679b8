#include "mpitrain/planner/memory.hpp"

#include <algorithm>
#include <cstdio>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/parallel/ring_attention.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/train/gather.hpp"

namespace mpitrain {

ActivationElements activation_elements(const ModelConfig& c, const ModelShard& s, int B, int T,
                                       int slots, Recompute recompute, bool sequence_parallel) {
  // In double: exact below 2^53 elements, and no overflow for absurd sizes (they are refused).
  const double N = static_cast<double>(B) * T, C = c.d_model, hs = c.head_size();
  const bool sp = sequence_parallel && s.tp > 1;
  const double Ns = sp ? N / s.tp : N, NsC = Ns * C;  // the sequence-parallel region's rows
  const double NH = c.n_head / s.tp, NKV = c.n_kv_head / s.tp;
  const double Vl = c.padded_vocab() / s.tp, NC = N * C;
  const double QKV = (NH + 2 * NKV) * hs, A = NH * hs;
  const auto fc = [&](double Fl) { return c.arch == Arch::Llama ? 2 * Fl : Fl; };
  const double P = B * NH * T;  // attention state: a log-sum-exp per row (both backends)
  const int begin = s.layer_begin, end = s.layer_end < 0 ? c.n_layer : s.layer_end;  // -1 = all
  const double L = end - begin;
  // MoE layers among them (ModelConfig::is_moe_layer) and the dense ones; their local MLP widths
  // (an MoE layer's: its shared experts'); F the widest, which the gradient buffers take.
  const double Lm = c.moe_layers(begin, end), Ld = L - Lm;
  const double Fd = static_cast<double>(c.d_ff / s.tp);
  const double Fs = c.n_experts > 0 ? c.n_shared_experts * c.expert_width() / s.tp : 0;
  const double F = std::max(Ld > 0 ? Fd : 0.0, Lm > 0 ? Fs : 0.0);
  // What an MoE layer keeps (model/moe.hpp), on its Ns rows, R K of them routed: xs, y, h, a;
  // logits, probs (E), lse, gates (K), the sums of probs (E, once) and, with the shared experts'
  // gate, its value and their output (C) in fp32; experts, slots,
  // offsets and counts in int32. The router's state and scratch are host memory (a device's
  // too): counted here all the same.
  const double E = c.n_experts, K = c.top_k, Fe = c.expert_width(), RK = Ns * K;
  const double moe_acts = RK * (2 * C + 3 * Fe),
               moe_stats = Ns * (2 * E + 1 + K) + E + (c.moe_shared_gate ? Ns * (C + 1) : 0);
  const double moe_ids = 2 * RK + 2 * (E + 1);
  const bool full = recompute == Recompute::Full, none = recompute == Recompute::None;
  const double qk_pre = c.qk_norm ? N * QKV : 0, qk_stats = c.qk_norm ? N * (NH + NKV) : 0;
  const auto block = [&](double Fl) {
    return 5 * NsC + N * QKV + N * A + N * fc(Fl) + N * Fl + qk_pre;
  };
  const double block_stats = 4 * Ns + qk_stats;
  const double shared_atty = recompute == Recompute::Selective ? N * A : 0;  // recomputed
  // The slot's kept blocks: each layer's set but probs and res3 (and the shared atty), + res3.
  const double kept = full ? L * NsC
                           : Ld * block(Fd) + Lm * (block(Fs) + moe_acts) + L * (NsC - shared_atty);
  const double kept_stats = full ? 0 : L * block_stats + Lm * moe_stats;
  // full: one set of the widest block, with an MoE layer's buffers when the stage has one.
  const bool any_moe = Lm > 0;
  ActivationElements e;
  e.compute = (full ? block(F) + (any_moe ? moe_acts : 0) : shared_atty) +
              slots * (NsC + kept + (s.last_stage ? NsC + N * Vl : 0)) + NsC + NC + (sp ? NC : 0) +
              N * QKV + N * A + N * fc(F) + N * F + (any_moe ? RK * (C + 3 * Fe) : 0);
  e.stats = (full ? block_stats + (any_moe ? moe_stats : 0) + P : none ? 0 : P) +
            slots * (kept_stats + (none ? L * P : 0) + (s.last_stage ? 2 * Ns : 0)) + P + 4 * N +
            (any_moe ? 3 * NsC + RK * C + 2 * E * C + Ns * E + RK : 0);  // MoE's host scratch
  e.ids = (full ? (any_moe ? moe_ids : 0) : 0) + slots * (full ? 0 : Lm * moe_ids);
  return e;
}

double compute_bytes(const RunShape& run) {
  return run.precision != Precision::Fp32 ? 2.0 : 4.0;  // both backends store bf16/fp16 in 2
}

namespace {

// Elements of the largest piece of zero_range(n, ranks); a count past size_t (an absurd model,
// only ever refused) as its plain share.
double largest_piece(double n, int ranks) {
  return n < 1e18 ? static_cast<double>(zero_range(static_cast<size_t>(n), ranks, 0).size())
                  : n / ranks;
}

}  // namespace

StageUnits stage_units(const ModelConfig& config, const ModelShard& shard, int shard_ranks) {
  // A two-layer model's layer 0 is a dense block (no experts) or an MoE block (moe-every 1).
  ModelConfig dense = config, moe = config;
  dense.n_layer = moe.n_layer = 2;
  dense.n_experts = 0;
  moe.moe_every = 1;
  moe.moe_first_dense = 0;
  ModelShard ends = shard, one_block = shard;
  ends.layer_begin = ends.layer_end = 0;
  one_block.layer_begin = 0;
  one_block.layer_end = 1;
  StageUnits u;
  const int begin = shard.layer_begin, end = shard.layer_end < 0 ? config.n_layer : shard.layer_end;
  u.layers = end - begin;
  u.moe_layers = config.moe_layers(begin, end);
  const ParamLayout outside(dense, ends);
  for (const FlatRange& unit : outside.units()) {
    const double n = static_cast<double>(unit.size());
    u.outer += n;
    u.outer_pieces += largest_piece(n, shard_ranks);
    u.largest = std::max(u.largest, n);
    ++u.outer_units;
  }
  u.block = static_cast<double>(ParamLayout(dense, one_block).total()) - u.outer;
  u.block_piece = largest_piece(u.block, shard_ranks);
  if (u.moe_layers > 0) {
    const ParamLayout moe_layout(moe, one_block);
    u.moe_block = static_cast<double>(moe_layout.total()) - u.outer;
    for (const ParamTensor& t : moe_layout.tensors())
      if (t.ep_split) u.moe_experts += static_cast<double>(t.numel);
    // Expert parallelism: the ep-split experts' piece is of expert-dp = shard_ranks / ep ranks.
    u.moe_block_piece =
        u.moe_experts > 0
            ? largest_piece(u.moe_block - u.moe_experts, shard_ranks) +
                  largest_piece(u.moe_experts, std::max(1, shard_ranks / shard.ep))
            : largest_piece(u.moe_block, shard_ranks);
  }
  u.largest = std::max(u.largest, u.largest_block());
  return u;
}

double shard_params(const ModelConfig& config, const ModelShard& shard) {
  return stage_units(config, shard, 1).params();
}

double usable_memory(double rank_bytes, double baseline_bytes) {
  return rank_bytes - kMemoryMargin * std::max(0.0, rank_bytes - baseline_bytes);
}

std::string zero_label(const Layout& layout) {
  return std::to_string(layout.zero) +
         (layout.zero == 3 && !layout.reshard_after_forward ? "k" : "");
}

std::string memory_text(double bytes) {
  char text[32];
  if (bytes >= (1 << 30)) std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1 << 30));
  else std::snprintf(text, sizeof text, "%.2f MiB", bytes / (1 << 20));
  return text;
}

std::string memory_breakdown(const MemoryEstimate& e) {
  return "params " + memory_text(e.params) + ", grads " + memory_text(e.grads) + ", optimizer " +
         memory_text(e.optimizer) + ", master " + memory_text(e.master) + ", activations " +
         memory_text(e.activations) + ", buffers " + memory_text(e.buffers);
}

int micro_batches(const RunShape& run, const Layout& layout) {
  return run.global_batch / (layout.dp * layout.micro_batch);
}

MemoryEstimate stage_memory(const ModelConfig& config, const RunShape& run, const Layout& layout,
                            const std::vector<int>& stage_first_layer, int stage,
                            double baseline_bytes) {
  GridShape grid{layout.dp, layout.tp, layout.pp};
  grid.ep = layout.ep;  // the routed experts: E/ep of them held
  const ModelShard shard = shard_of(grid, stage_first_layer, 0, stage);
  const StageUnits units = stage_units(config, shard, layout.shard_ranks());
  const double n = units.params();
  const bool low = run.precision != Precision::Fp32;
  const double w = compute_bytes(run);
  const int m = micro_batches(run, layout);
  const int slots = pipeline_slots(run.schedule, m, layout.pp, stage);
  const int local_len = run.seq_len / layout.cp;  // context parallelism: this rank's chunks
  const double rows = static_cast<double>(layout.micro_batch) * local_len;

  MemoryEstimate e;
  // ZeRO-1/2's owned part (zero_owned): a piece of the dense elements over `ranks`, with expert
  // parallelism one of the ep-split experts over ranks / ep (then a compact copy of its own).
  const double experts = units.moe_layers * units.moe_experts;
  const auto owned_piece = [&](int ranks) {
    return experts > 0 ? largest_piece(n - experts, ranks) +
                             largest_piece(experts, std::max(1, ranks / layout.ep))
                       : largest_piece(n, ranks);
  };
  if (layout.zero >= 2) {
    // ZeRO-2: one contiguous range of the stage, in place in the whole copy (sharded_units.hpp);
    // ZeRO-3: a piece of every unit, in a buffer of its own, and the gathered units.
    const double S = layout.zero == 2 ? owned_piece(layout.shard_ranks()) : units.shard();
    const double gathered = !layout.reshard_after_forward ? n : units.unit_buffers();
    e.params = layout.zero == 2 ? (n + (experts > 0 ? S : 0)) * w : (S + gathered) * w;
    e.grads = (S + units.unit_buffers()) * 4.0;
    e.optimizer = 4.0 * run.optimizer_states * S;
    e.master = low ? 4.0 * S : 0.0;
  } else {
    // ZeRO-1's largest piece of the stage (grad_sync.hpp), or all of it.
    const double owned = layout.zero == 1 ? owned_piece(layout.grad_ranks()) : n;
    const double compact = layout.zero == 1 && experts > 0 ? owned : 0;  // bucket_sync.hpp
    e.params = (n + compact) * w;
    e.grads = (n + compact) * 4.0;
    e.optimizer = 4.0 * run.optimizer_states * owned;
    e.master = low ? 4.0 * owned : 0.0;
  }
  e.activations =
      activation_elements(config, shard, layout.micro_batch, local_len, slots, layout.recompute,
                          layout.sequence_parallel)
          .bytes(w);
  if (layout.cp > 1)  // the ring's K/V blocks and fp32 accumulators
    e.activations += static_cast<double>(RingAttention::bytes(
        layout.micro_batch, local_len, config.n_head / layout.tp, config.n_kv_head / layout.tp,
        config.head_size(), run.precision == Precision::Fp32 ? Precision::Fp32 : run.precision));
  if (layout.pp > 1)  // input-gradient copies, of this rank's rows under sequence parallelism
    e.buffers += slots * rows * config.d_model * w / (layout.sequence_parallel ? layout.tp : 1);
  if (!run.gpu) {
    e.buffers += 4.0 * 2 * (m + 1) * rows;  // tokens and targets: the step's and the loader's
    if (low)  // the fp32 staging of 2-byte tensors: products' tiles, whole sequences
      e.buffers += static_cast<double>(cpu_staging_bytes(
          layout.micro_batch, local_len, config.n_head / layout.tp,
          config.n_kv_head / layout.tp, config.head_size(), layout.cp > 1));
    // Open MPI's non-blocking all-reduce works on a copy of the bucket it is given (measured:
    // one bucket's worth at the peak, the buckets overlapping little).
    if (layout.grad_ranks() > 1 && layout.zero < 2)
      e.buffers += std::min(n * 4.0, run.bucket_mb * (1 << 20));
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
