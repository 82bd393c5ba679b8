// How long one optimizer step of a layout takes: the planner's time model.
//
// Per micro-batch on the slowest stage s, t_fwd = (2 W_s + 4 L_s d T / tp) x B Tl / rate, W_s the
// stage's matmul parameters per tp rank, L_s its layers, Tl = T / cp this rank's rows of a
// sequence (each against the whole T: with the chunks' causal balance a cp rank does 1/cp of the
// sequence's attention), rate = peak x efficiency x r / (r + half_rows) with r = B Tl / threads
// (small GEMMs run below the peak):
//   compute  t_fwd + 2 t_fwd, plus t_fwd again under full recomputation, plus the recomputed
//            attention scores (2 L_s d T / tp flops per token) under selective
//   tp       4 all-reduces of B Tl C activations per layer (6 under full recomputation), one
//            more for the embedding / the head; ring over tp inside a node
//   p2p      the stage's output forward and its input gradient back (pp > 1)
//   cp ring  (cp > 1) per layer, the K/V blocks (B Tl x 2 NKV/tp x hs, w bytes) passed around
//            the cp group: cp - 1 sends per forward (again under either recomputation), and in
//            backward cp - 1 K/V sends plus cp fp32 dK/dV accumulators. The model assumes them
//            overlapped: each ring step's message hides behind that step's attention compute
//            (1/cp of the layer's, twice that in backward); only a message's excess over it
//            is exposed, and the last accumulator's trip home always is
// Step = (m + pp - 1) x (compute + tp + p2p + exposed cp ring)
//        (1F1B and GPipe: bubble (pp-1)/(m+pp-1));
//        CPU ranks oversubscribing the cores (o = ranks / cores > 1) run at a core's rate when
//        they have one: of the m + pp - 1 slots, slot j with a_j busy stages takes
//        max(1, a_j o / pp) times (...), the busy ranks sharing the cores the idle ones leave
//      + the data-parallel gradient sync not hidden behind the last micro-batch's backward, over
//        the gradients' group of dp x cp ranks (dp below; ring, 2(dp-1)/dp x bytes / bw, over
//        the intra- or inter-node bandwidth by where the group's ranks sit; the last bucket is
//        never hidden); under ZeRO-1 a reduce-scatter instead and an
//        all-gather of the updated parameters after the step. ZeRO-2/3 over shard groups of D
//        ranks (dp, or HSDP's --zero-shard-size), one collective per unit (ParamLayout::units()),
//        the largest unit's never hidden: per micro-batch a reduce-scatter of the stage's fp32
//        gradients ((D-1)/D x P_s x 4) behind its backward as above; ZeRO-2 then all-gathers the
//        updated parameters ((D-1)/D x P_s x w, exposed); ZeRO-3 gathers them per micro-batch
//        before forward and again before backward (with --zero3-reshard-after-forward false once
//        per step, before the first forward), hidden behind that pass's compute unless the
//        gathers take longer; HSDP sums the S-float shard over the dp/D replicas (all-reduce,
//        exposed)
//      + the tied embedding's gradient sum between the first and last stage (gpt2, pp > 1)
//      + the optimizer at the memory bandwidth: per parameter of its range 4 (3 + 2k) bytes (read
//        the parameter, its gradient and k state values, write the parameter and the state:
//        AdamW 28), clearing the gradients and their norm 8 bytes per parameter held (ZeRO-2/3:
//        both over the rank's S-element shard).
// Collective cost: ring, 2(n-1)/n x bytes / bw + latency for an all-reduce, (n-1)/n x bytes / bw
// + latency for a reduce-scatter or an all-gather; a point-to-point send bytes / bw + latency.
#pragma once

#include "mpitrain/model/config.hpp"
#include "mpitrain/planner/cluster.hpp"
#include "mpitrain/planner/memory.hpp"

namespace mpitrain {

// Figures fitted to measurement (bench/plan_validate.sh on CPU) or published results (GPU).
struct Calibration {
  double efficiency = 0.5;       // fraction of peak the model's compute reaches with large GEMMs
  double half_rows = 0;          // a thread's GEMM rows (micro-batch tokens / threads) at which
                                 // the compute runs at half that efficiency
  double baseline_bytes = 0;     // per rank, see memory.hpp
  double latency_s = 10e-6;      // per collective call or point-to-point message
  double scheduling_s = 0;       // CPU, more ranks than cores: added to each call and message
                                 // (the wait for the partner rank to get a core)
};

struct TimeEstimate {  // seconds per optimizer step, and shares of it
  double compute = 0;     // forward + backward (+ recompute) of every micro-batch, busy stages
  double bubble = 0;      // pipeline fill and drain: (pp-1)/(m+pp-1) of the pipelined part
  double tp_comm = 0;     // tensor-parallel all-reduces (never hidden)
  double p2p = 0;         // pipeline sends and receives (counted as exposed)
  double cp_exposed = 0;  // context parallelism's ring messages not hidden behind its compute
  double cp_ring = 0;     // all of the ring's messages' time, hidden or not (cp_exposed's base)
  double ep_comm = 0;     // expert parallelism's token all-to-alls (never hidden)
  double dp_exposed = 0;  // data-parallel gradient sync (and ZeRO's all-gathers) not hidden
  double optimizer = 0;
  double step = 0;
  double bubble_fraction = 0;      // (pp-1)/(m+pp-1)
  double exposed_comm_fraction = 0;  // (tp + p2p + cp exposed + ep + dp exposed) / step
};

// Useful model FLOPs per token (PaLM: 6N + 12 L d T, N = ParamLayout::matmul_params(), T the
// attention span: the sliding window where shorter than the sequence): the MFU numerator; the
// trainer's MFU counts with it.
double model_flops_per_token(const ModelConfig& config, int seq_len);

TimeEstimate estimate_time(const ModelConfig& config, const RunShape& run, const Layout& layout,
                           const Cluster& cluster, const Calibration& calibration);

}  // namespace mpitrain
