#include "mpitrain/planner/timing.hpp"

#include <algorithm>
#include <vector>

#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/train/gather.hpp"

namespace mpitrain {

namespace {

// Ring collectives over n ranks: bytes each rank contributes, bus bandwidth bw, a per call.
double all_reduce_s(double bytes, int n, double bw, double a) {
  return n < 2 ? 0.0 : 2.0 * (n - 1) / n * bytes / bw + a;
}
double half_ring_s(double bytes, int n, double bw, double a) {  // reduce-scatter or all-gather
  return n < 2 ? 0.0 : 1.0 * (n - 1) / n * bytes / bw + a;
}

// Bandwidth a group of the grid gets: inside a node if every such group lies in one node.
double group_bw(const Cluster& cluster, const GridShape& grid, Group g) {
  for (int r = 0; r < grid.size(); ++r)
    for (int member : Grid::members(grid, g, r))
      if (!cluster.same_node(r, member)) return cluster.inter_bw;
  return cluster.intra_bw;
}

// Bandwidth of the ZeRO-2/3 parts of the gradient (dp x cp) groups, D ranks a shard: the shard
// groups (dp-cp ranks g D .. g D + D - 1) or, HSDP, the replica groups (i, i + D, ...).
double dp_part_bw(const Cluster& cluster, const GridShape& grid, int D, bool replicas) {
  for (int r = 0; r < grid.size(); ++r)
    for (int member : Grid::members(grid, replicas ? Group::DpReplica : Group::DpShard, r, D))
      if (!cluster.same_node(r, member)) return cluster.inter_bw;
  return cluster.intra_bw;
}

// Context parallelism's ring (ring_attention.cpp), exposed seconds of one layer's pass of one
// micro-batch: each of the cp steps computes the local queries against one K/V block (step_s,
// 1/cp of the rank's attention, the causal balance) while the next block is in flight; a
// message longer than its step's compute shows the excess. kv_s: one K/V block, acc_s: one fp32
// dK/dV accumulator. Forward: cp - 1 K/V sends. Backward (steps twice the compute): the K/V
// sends of steps 0 .. cp-2 and the accumulators arriving at steps 1 .. cp-1, and the own
// block's accumulator coming home after the last step, never hidden.
double ring_forward_exposed(int cp, double kv_s, double step_s) {
  return cp < 2 ? 0.0 : (cp - 1) * std::max(0.0, kv_s - step_s);
}
double ring_backward_exposed(int cp, double kv_s, double acc_s, double step_s) {
  if (cp < 2) return 0.0;
  const double b = 2 * step_s;
  return std::max(0.0, kv_s - b) + (cp - 2) * std::max(0.0, kv_s + acc_s - b) +
         std::max(0.0, acc_s - b) + acc_s;
}

// ZeRO-2/3's data-parallel communication of one stage not hidden behind compute, per step: the
// gradients reduce-scattered per micro-batch behind its backward (window), ZeRO-2's parameters
// all-gathered after the update, ZeRO-3's gathered before each unit's forward (fwd) and
// backward (or once per step when kept), HSDP's shard summed over the replicas. One collective
// per unit; the largest unit's (the prefetch's first, the reduce-scatter's last) never hidden.
double sharded_exposed(const ModelConfig& config, const ModelShard& shard, const Layout& layout,
                       const Cluster& cluster, const GridShape& grid, int m, double w, double fwd,
                       double window, double a) {
  const int D = layout.shard_ranks(), replicas = layout.grad_ranks() / D;
  const StageUnits u = stage_units(config, shard, D);
  const double bw = dp_part_bw(cluster, grid, D, false);
  auto per_unit = [&](double bytes) {
    return D < 2 ? 0.0 : half_ring_s(bytes, D, bw, 0) + u.units() * a;
  };
  const double rs = per_unit(u.params() * 4.0), ag = per_unit(u.params() * w);
  const double rs_unit = half_ring_s(u.largest * 4.0, D, bw, a);
  const double ag_unit = half_ring_s(u.largest * w, D, bw, a);
  const double forward_gather = std::max(ag - fwd, ag_unit);
  double exposed = 0;
  if (layout.zero == 2)
    exposed = m * std::max(rs - window, rs_unit) + ag;
  else if (layout.reshard_after_forward)
    exposed = m * (forward_gather + std::max(ag + rs - window, ag_unit + rs_unit));
  else
    exposed = forward_gather + m * std::max(rs - window, rs_unit);
  return exposed + all_reduce_s(u.shard() * 4.0, replicas, dp_part_bw(cluster, grid, D, true), a);
}

// Parameters of this shard that take part in a token's matrix products (as
// ParamLayout::matmul_params counts them for the whole model): all but wpe and the wte lookup; a
// tied wte is the head on the last stage; of the routed experts, the top_k of n_experts a token
// goes to (the router in full).
double matmul_params(const ModelConfig& config, const ParamLayout& layout) {
  double n = 0;
  for (const ParamTensor& t : layout.tensors()) {
    if (t.slot == Slot::Wpe) continue;
    if (t.slot == Slot::Wte && !(config.tie_embeddings && layout.shard().last_stage)) continue;
    const bool routed = t.slot == Slot::ExpertFcW || t.slot == Slot::ExpertProjW;
    const double used = routed ? static_cast<double>(config.top_k) / config.n_experts : 1.0;
    n += static_cast<double>(t.numel) * used;
  }
  return n;
}

// Elements of the shard's tensors replicated over tp (their gradients are averaged every step),
// and how many tensors that is.
void replicated(const ParamLayout& layout, double& elements, int& tensors) {
  elements = 0;
  tensors = 0;
  for (const ParamTensor& t : layout.tensors())
    if (t.tp_replicated()) elements += static_cast<double>(t.numel), ++tensors;
}

}  // namespace

double model_flops_per_token(const ModelConfig& config, int seq_len) {
  return 6.0 * static_cast<double>(ParamLayout(config).matmul_params()) +
         12.0 * config.n_layer * config.d_model * config.attention_span(seq_len);
}

TimeEstimate estimate_time(const ModelConfig& config, const RunShape& run, const Layout& layout,
                           const Cluster& cluster, const Calibration& cal) {
  GridShape grid{layout.dp, layout.tp, layout.pp, layout.cp};
  grid.ep = layout.ep;
  const std::vector<int> first = pipeline_layer_split(config.n_layer, layout.pp, "");
  const int m = micro_batches(run, layout);
  const double w = compute_bytes(run);
  // This rank's rows of a micro-batch: T / cp of each sequence under context parallelism.
  const double tokens = static_cast<double>(layout.micro_batch) * run.seq_len / layout.cp;
  const double act_bytes = tokens * config.d_model * w;  // one (B, T, C) activation
  // More CPU ranks than cores: a busy rank runs on a whole core while others wait, and a message
  // waits until its partner is scheduled.
  const double oversub = cluster.oversubscription();
  const double rows = tokens / cluster.threads_per_rank();  // a thread's share of a GEMM's rows
  const double rate = cluster.peak_flops * oversub * cal.efficiency * rows / (rows + cal.half_rows);
  const double a = cal.latency_s + (oversub > 1 ? cal.scheduling_s : 0.0);
  const double dp_bw = group_bw(cluster, grid, Group::DpCp);  // the gradients' group
  const int dp = layout.grad_ranks();
  const double pp_bw = group_bw(cluster, grid, Group::Pp);
  const double cp_bw = group_bw(cluster, grid, Group::Cp);
  // One K/V block of the ring: this rank's rows x 2 NKV/tp heads, in w bytes and as fp32 dK/dV.
  const double kv = tokens * 2.0 * config.n_kv_head / layout.tp * config.head_size();
  const double kv_s = kv * w / cp_bw + a, acc_s = kv * 4.0 / cp_bw + a;
  const double emb_bw = group_bw(cluster, grid, Group::Embedding);
  const double ep_bw = group_bw(cluster, grid, Group::Ep);
  // Expert parallelism: one all-to-all of the routed rows (tokens x top_k x C), all but 1/ep of
  // them leaving the rank: dispatch and combine forward; backward the rows again (the owners
  // recompute h and a), the gradients of y there and those of xs back (model/moe.hpp).
  const double ep_call = layout.ep > 1 ? tokens * config.top_k * config.d_model * w *
                                                 (layout.ep - 1) / layout.ep / ep_bw + a
                                       : 0.0;
  const double tp_call = all_reduce_s(act_bytes, layout.tp, cluster.intra_bw, a);
  const bool full = layout.recompute == Recompute::Full;

  double micro = 0, micro_compute = 0, micro_tp = 0, micro_p2p = 0, micro_cp = 0;  // slowest
  double micro_ring = 0;  // the slowest stage's ring messages, hidden or not
  double micro_ep = 0;
  double dp_exposed = 0, per_step_tp = 0, optimizer = 0;
  for (int s = 0; s < layout.pp; ++s) {
    const ModelShard shard = shard_of(grid, first, 0, s);
    const ParamLayout params(config, shard);
    const int L = shard.layer_end - shard.layer_begin;
    // Forward flops per token on this rank: 2 per matmul parameter, 4 L d T / tp for attention
    // (every query against the whole sequence T, or its sliding window; under cp the rank's T/cp
    // rows do 1/cp of the sequence's attention, the chunks' causal balance).
    const double attention =
        4.0 * L * config.d_model * config.attention_span(run.seq_len) / layout.tp;
    const double fwd = (2.0 * matmul_params(config, params) + attention) * tokens / rate;
    double extra = 0;
    if (full) extra = fwd;
    if (layout.recompute == Recompute::Selective) extra = 0.5 * attention * tokens / rate;
    const double compute = 3.0 * fwd + extra;
    const int tp_calls = (full ? 6 : 4) * L + (shard.first_stage ? 1 : 0) + (shard.last_stage ? 1 : 0);
    // Sequence parallelism: each all-reduce becomes a reduce-scatter + all-gather of the same
    // bytes; backward gathers each column-parallel layer's normed input again (half an
    // all-reduce each: 2 a block, 1 for the head).
    const double regathers =
        layout.sequence_parallel ? 0.5 * (2 * L + (shard.last_stage ? 1 : 0)) : 0.0;
    const double tp = (tp_calls + regathers) * tp_call;
    const double p2p = layout.pp > 1 ? 2.0 * (act_bytes / pp_bw + a) : 0.0;
    // The ring: forward again under either recomputation (selective recomputes attention).
    const double ring_step = attention / L * tokens / rate / layout.cp;  // a layer's, a step's
    const int forwards = layout.recompute == Recompute::None ? 1 : 2;
    const double ring =
        layout.cp < 2 ? 0.0
                      : L * (forwards * ring_forward_exposed(layout.cp, kv_s, ring_step) +
                             ring_backward_exposed(layout.cp, kv_s, acc_s, ring_step));
    const double ep =
        config.moe_layers(shard.layer_begin, shard.layer_end) * (full ? 7 : 5) * ep_call;
    if (compute + tp + p2p + ring + ep > micro) {
      micro = compute + tp + p2p + ring + ep;
      micro_compute = compute, micro_tp = tp, micro_p2p = p2p, micro_cp = ring, micro_ep = ep;
      micro_ring = layout.cp < 2 ? 0.0 : L * (forwards + 1) * (layout.cp - 1) * kv_s +
                                             L * layout.cp * acc_s;
    }

    // Once per step: gradient sync over dp, behind the last micro-batch's backward.
    const double n = static_cast<double>(params.total());
    const double grad_bytes = n * w;
    const double bucket = std::min(grad_bytes, run.bucket_mb * (1 << 20));
    const double window = 2.0 * fwd + extra + tp * 0.5;
    double exposed = 0;
    if (layout.zero >= 2) {
      exposed = sharded_exposed(config, shard, layout, cluster, grid, m, w, fwd, window, a);
    } else if (layout.zero == 1) {
      const double rs = half_ring_s(grad_bytes, dp, dp_bw, a);
      exposed = std::max(rs - window, half_ring_s(bucket, dp, dp_bw, a)) +
                half_ring_s(n * w, dp, dp_bw, a);  // the updated parameters, gathered
    } else {
      const double ar = all_reduce_s(grad_bytes, dp, dp_bw, a);
      exposed = std::max(ar - window, all_reduce_s(bucket, dp, dp_bw, a));
    }
    if (config.tie_embeddings && layout.pp > 1 && (shard.first_stage || shard.last_stage))
      exposed += all_reduce_s(params.find("wte").numel * w, 2, emb_bw, a);
    dp_exposed = std::max(dp_exposed, exposed);
    double rep_elements = 0;
    int rep_tensors = 0;
    replicated(params, rep_elements, rep_tensors);
    per_step_tp = std::max(per_step_tp, all_reduce_s(rep_elements * 4.0, layout.tp, cluster.intra_bw, 0) +
                                            (layout.tp > 1 ? a * rep_tensors : 0));
    // Parameters the optimizer updates, and gradients held (cleared, their norm taken).
    const double held =
        layout.zero >= 2 ? stage_units(config, shard, layout.shard_ranks()).shard() : n;
    // ZeRO-1 with expert parallelism: the ep-split experts are split over expert-dp (dp / ep).
    double experts = 0;
    for (const ParamTensor& t : params.tensors())
      if (t.ep_split) experts += static_cast<double>(t.numel);
    const double shard_n =
        layout.zero == 1 ? (n - experts) / dp + experts * layout.ep / dp : held;
    const double update_bytes = 4.0 * (3 + 2 * run.optimizer_states);  // read p, g, state; write p, state
    optimizer = std::max(optimizer, (update_bytes * shard_n + 8.0 * held) / cluster.mem_bw);
  }

  // The pipeline: m micro-batches through pp stages, m + pp - 1 slots of the slowest stage's
  // micro-batch time; slot j has a_j = min(j + 1, pp, m, m + pp - 1 - j) stages busy.
  // Oversubscribed, the busy stages' ranks share the node's cores (an idle stage lends its
  // cores out): the slot takes max(1, a_j x o / pp) micro-batch times.
  const int pp = layout.pp;
  double slots = 0;
  for (int j = 0; j < m + pp - 1; ++j)
    slots += std::max(1.0, std::min({j + 1, pp, m, m + pp - 1 - j}) * oversub / pp);
  const double pipelined = slots * micro;
  const double busy = oversub * m;  // micro-batch times a rank's work takes, cores shared
  TimeEstimate t;
  t.compute = busy * micro_compute;
  t.tp_comm = busy * micro_tp + per_step_tp;
  t.p2p = busy * micro_p2p;
  t.cp_exposed = busy * micro_cp;
  t.cp_ring = busy * micro_ring;
  t.ep_comm = busy * micro_ep;
  t.bubble = pipelined - busy * micro;
  t.dp_exposed = dp_exposed;
  t.optimizer = optimizer;
  t.step = pipelined + per_step_tp + dp_exposed + optimizer;
  t.bubble_fraction = t.bubble / pipelined;
  t.exposed_comm_fraction = (t.tp_comm + t.p2p + t.cp_exposed + t.ep_comm + t.dp_exposed) / t.step;
  return t;
}

}  // namespace mpitrain
