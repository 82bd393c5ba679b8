// What one rank of a layout holds: the planner's memory model.
//
// Per rank of pipeline stage s (every tp rank of a stage holds the same amount), in bytes, by
// ZeRO level; w = the compute tensors' bytes: 4 in fp32, 2 in bf16/fp16 (CPU and GPU); k = the
// optimizer's fp32 state buffers (adamw, lamb: m and v; sgd: momentum); P_s =
// ParamLayout(config, shard of s).total(); D = the ZeRO-2/3 shard group (dp, or
// --zero-shard-size: HSDP); S = sum over the stage's units (ParamLayout::units(): each block,
// and wte, wpe, the final norm, lm_head alone) of the largest piece zero_range(unit, D) (about
// P_s / D); G = the stage's outer units (wte, wpe, final norm, lm_head) + 2 x a block unit:
//                0, 1                        2                         3
//   params       P_s x w                     P_s x w                   S x w + gathered x w
//   grads        P_s x 4                     (O2 + G) x 4              (S + G) x 4
//   optimizer    O x 4 k                     O2 x 4 k                  S x 4 k
//   master       O x 4 (bf16/fp16 only)      O2 x 4 (bf16/fp16 only)   S x 4 (bf16/fp16 only)
//   O = P_s, or with ZeRO-1 the largest piece of zero_range(P_s, dp) (about P_s / dp); O2 the
//   same over D. ZeRO-2 owns one contiguous range of the stage, as ZeRO-1, updated in place in
//   the whole compute copy; its gradients are the sharded sum (O2) plus the unit buffers
//   backward writes before each reduce-scatter (G). ZeRO-3 keeps its piece and what is gathered: reshard after forward (the
//   default) the outer units + 2 blocks (the prefetch's two buffers); without, P_s (every unit
//   stays gathered between forward and backward).
//   activations  A_s x w + S_s x 4   activation_elements(): the Model's compute buffers A_s for
//                               the slots the schedule keeps (pipeline_slots) and the backward
//                               scratch, and their fp32 statistics S_s
//   buffers      the pipeline's token lists (2 m B T int32, CPU only), its input-gradient copies
//                (slots B T C x w, pp > 1), and on CPU with ZeRO 0/1 one gradient bucket
//                (--bucket-mb) that MPI's non-blocking all-reduce copies (dp > 1; ZeRO-2/3
//                reduce-scatter the unit buffers in place); on CPU in bf16/fp16 the fp32
//                staging of 2-byte tensors: products' tiles, whole sequences (cpu_staging_bytes)
//   baseline     the process without the model: MPI, OpenBLAS, the binary (CPU); CUDA context,
//                library workspaces and communicator buffers (GPU) — a calibrated constant
// The layout's figure is the largest stage's.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

#include "mpitrain/backend/precision.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"

namespace mpitrain {

// One candidate: the process grid and the memory/time trade-offs of a run.
struct Layout {
  int dp = 1, tp = 1, pp = 1;
  int micro_batch = 1;
  int zero = 0;  // ZeRO level: 1 optimizer state (and master), 2 + gradients, 3 + parameters
  Recompute recompute = Recompute::None;
  bool reshard_after_forward = true;  // ZeRO-3: gather each unit again for backward
  int zero_shard = 0;  // ZeRO-2/3: shard over groups of this many dp ranks (HSDP); 0 = all dp
  bool sequence_parallel = false;  // tp > 1: the norm/residual regions on N/tp rows (model.hpp)
  int cp = 1;          // context parallelism: T/cp rows of each sequence per rank, a K/V ring
  int ep = 1;          // expert parallelism: E/ep routed experts per rank, token all-to-alls
  int grad_ranks() const { return dp * cp; }  // the gradients' (ZeRO's) group: dp x cp
  int shard_ranks() const { return zero_shard > 0 ? zero_shard : grad_ranks(); }  // the D
};

// What the run trains with, whatever the layout.
struct RunShape {
  int seq_len = 64;
  int global_batch = 8;  // sequences per optimizer step
  Precision precision = Precision::Fp32;
  PipelineSchedule schedule = PipelineSchedule::OneFOneB;
  double bucket_mb = 25.0;  // data-parallel gradient bucket (MiB)
  int optimizer_states = 2; // fp32 buffers per parameter: adamw, lamb 2 (m, v); sgd 1
  bool gpu = false;         // true: the GPU backend (no host-side token and bucket buffers)
};

// Elements of the activation buffers Model allocates for `shard` with `slots` micro-batches of
// B sequences of T tokens in flight, plus its backward scratch (model.cpp's constructor), as the
// sum of compute tensors (the storage type) + fp32 statistics (norm mean/rstd, attention state
// P, cross-entropy scratch):
//   block   = 5NsC + N*QKV + N*A + N*FC + N*Fl + 4Ns    a block's buffers but probs and res3
//   kept    = none: block + NsC + P   selective: block - N*A + NsC   full: NsC   per layer per slot
//   shared  = none: 0   selective: N*A + P   full: block + P                   once
//   slot    = NsC (stage input) + L*kept + [NsC + N*Vl + 2Ns  on the last stage]
//   scratch = NsC + NC [+ NC gathers, sp] + N*QKV + N*A + N*FC + N*Fl + P + 4N
//   total   = shared + slots*slot + scratch
// with N = B*T (T: this rank's tokens of a sequence, T/cp under context parallelism), Ns = N/tp
// under sequence parallelism (else N), P = B*NHl*T (attention's row log-sum-exps),
// QKV = (NHl + 2 NKVl) hs, A = NHl hs,
// FC = 2Fl (llama) or Fl, local counts NHl = heads/tp, NKVl = kv heads/tp, Fl = d_ff/tp,
// Vl = padded vocab/tp, L = the stage's layers.
// Mixture of experts (model/moe.hpp): an MoE layer's block has Fl = its shared experts' width/tp
// (maybe 0) and keeps per slot RK(2C + 3Fe) more (xs, y, h, a), Ns(2E + 1 + K) fp32 (logits,
// probs, lse, gates) and 2RK + 2(E + 1) int32 (ActivationElements::ids), with RK = Ns top_k, E
// experts of width Fe; the scratch's Fl is the stage's widest MLP, + RK(C + 3Fe) and fp32
// 3NsC + RK C + E C + Ns E + RK where the stage has an MoE layer; full's shared block likewise
// the widest, with an MoE layer's buffers.
// In double, so that absurd sizes give a figure to refuse instead of an overflow.
// Bytes of one compute-tensor element (the w above; also what tp and pp messages carry).
double compute_bytes(const RunShape& run);

struct ActivationElements {
  double compute = 0, stats = 0;
  double ids = 0;  // MoE layers' routing indices (int32)
  double total() const { return compute + stats + ids; }
  double bytes(double compute_bytes) const { return compute * compute_bytes + (stats + ids) * 4; }
};
ActivationElements activation_elements(const ModelConfig& config, const ModelShard& shard, int B,
                                       int T, int slots, Recompute recompute,
                                       bool sequence_parallel = false);

// A stage's ZeRO-2/3 units (ParamLayout::units()) without listing the shard's blocks one by one
// (n-layer may be absurd): a two-layer model's units outside the blocks and one block of each
// kind (dense; MoE: router, all E experts and the shared experts), each block counted per layer
// of its kind; pieces are the largest of zero_range(unit, shard_ranks).
struct StageUnits {
  double outer = 0, outer_pieces = 0;  // elements of the units outside the blocks, their pieces
  double block = 0, block_piece = 0;   // one dense block unit and its piece
  double moe_block = 0, moe_block_piece = 0;  // one MoE block unit and its piece (moe_layers > 0)
  double moe_experts = 0;  // of an MoE block, the ep-split experts' elements (0 without ep)
  double largest = 0;                  // the largest unit
  int outer_units = 0, layers = 0, moe_layers = 0;  // layers: all of the stage's, MoE among them
  int dense_layers() const { return layers - moe_layers; }
  double params() const { return outer + dense_layers() * block + moe_layers * moe_block; }  // P_s
  double shard() const {  // S
    return outer_pieces + dense_layers() * block_piece + moe_layers * moe_block_piece;
  }
  // The stage's largest block (ZeRO-2/3's two turn buffers are of its size); 0 without layers.
  double largest_block() const {
    return std::max(dense_layers() > 0 ? block : 0.0, moe_layers > 0 ? moe_block : 0.0);
  }
  double unit_buffers() const { return outer + 2 * largest_block(); }  // G
  int units() const { return outer_units + layers; }
};
StageUnits stage_units(const ModelConfig& config, const ModelShard& shard, int shard_ranks);

// ParamLayout(config, shard).total(), as stage_units counts it.
double shard_params(const ModelConfig& config, const ModelShard& shard);

struct MemoryEstimate {  // bytes held by one rank
  double params = 0, grads = 0, optimizer = 0, master = 0, activations = 0, buffers = 0,
         baseline = 0;
  double total() const {
    return params + grads + optimizer + master + activations + buffers + baseline;
  }
};

// The share of a rank's memory beyond its baseline that a plan leaves free, for what is allocated
// later (cuBLASLt/cuDNN workspaces, NCCL buffers, fragmentation): one figure for the planner
// (tools/plan) and --micro-batch-size auto (micro_batch_auto.hpp).
constexpr double kMemoryMargin = 0.10;

// Bytes a layout may hold in all (baseline included) on a rank of rank_bytes: the baseline plus
// (1 - kMemoryMargin) of the rest, as --micro-batch-size auto plans within the free memory
// (rank_bytes itself when the baseline does not fit).
double usable_memory(double rank_bytes, double baseline_bytes);

// The ZeRO level as the plan's table shows it: "0" to "3", "3k" for ZeRO-3 keeping what it
// gathered for forward until backward (--zero3-reshard-after-forward false).
std::string zero_label(const Layout& layout);

// "12.34 GiB" from 1 GiB up, "5.67 MiB" below (tiny test models).
std::string memory_text(double bytes);
// "params 1.45 GiB, grads 1.45 GiB, optimizer ..., master ..., activations ..., buffers ..."
std::string memory_breakdown(const MemoryEstimate& e);

// Micro-batches per step on each dp rank: global batch / (dp x micro-batch).
int micro_batches(const RunShape& run, const Layout& layout);

// One rank of stage `stage`; stage_first_layer from pipeline_layer_split (balanced).
MemoryEstimate stage_memory(const ModelConfig& config, const RunShape& run, const Layout& layout,
                            const std::vector<int>& stage_first_layer, int stage,
                            double baseline_bytes);

// The largest stage's figure (what must fit on every rank).
MemoryEstimate layout_memory(const ModelConfig& config, const RunShape& run, const Layout& layout,
                             double baseline_bytes);

}  // namespace mpitrain
