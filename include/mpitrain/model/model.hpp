// A decoder-only Transformer (GPT-2 or Llama) with explicit forward and backward, as in llm.c,
// for one shard of a parallel run (params.hpp): one pipeline stage's layers and, under tensor
// parallelism, this rank's slices, with Megatron's all-reduces over the tp group:
//   forward:  after the embedding (vocab-parallel), after attn.proj and mlp.proj (row-parallel)
//             — Megatron's "g"; the loss is the vocab-parallel cross-entropy (max and sums
//             all-reduced), so no rank holds the full logits;
//   backward: after each column-parallel layer's input gradient (attn.qkv, mlp.fc, head)
//             — Megatron's "f".
// With tp = 1 and one stage it is the plain single-rank model and communicates nothing.
//
// Sequence parallelism (ModelOptions::sequence_parallel, Megatron-Core's, tp > 1): the regions
// between a row-parallel and the next column-parallel layer — the embedding output, the norms
// and the residual adds — hold only this rank's rows: the N = B*Tlen rows of the flattened batch
// cut into tp contiguous blocks of Ns = N/tp, rank r holding rows [r Ns, (r+1) Ns) (Tlen divisible
// by tp, so that any B splits). Each "g" all-reduce becomes a reduce-scatter (the partial sums of
// all N rows in, this rank's Ns summed rows out); before each column-parallel layer (qkv, fc, the
// head) its normed input is all-gathered; backward mirrors it (the gradient entering a
// row-parallel layer and the embedding is all-gathered, each "f" is a reduce-scatter, and the
// normed input is gathered again for the weight gradient). The same bytes as the all-reduces plus
// that one all-gather per column-parallel layer in backward. Every (N,C) tensor of those regions
// (encoded, ln1/ln2/lnf and their statistics, attproj, res2, fcproj, res3, dres) is Ns rows; one
// (N,C) buffer receives the gathers. The norm weights' (and layernorm biases') gradients are then
// partial sums over each rank's rows: sync_replicated_grads sums them over tp. Row-parallel
// biases are still added by tp rank 0 before the reduce-scatter (their gradients, from the
// gathered output gradient, are whole on every rank, as without).
//
// Mixture of experts (config.is_moe_layer(l), model/moe.hpp): the layer's MLP is its shared
// experts (mlp.fc/mlp.proj of width dense_mlp_width(l), maybe none) plus the routed experts of a
// MoeLayer on this rank's Ns rows of ln2, added into fcproj after the shared experts' tp sum; the
// router and experts are replicated over tp (their gradients averaged; under sequence parallelism
// each rank routes its own rows, the gradients are partial sums, the statistics all-reduced). The
// aux and z losses are not in forward's returned loss: backward adds their gradient weighted by
// N x dloss, take_moe_stats reports them (the all-layers aux loss once backward has counted it:
// its weights need every MoE layer's routing, routed_counts). The router's state is host memory,
// the experts' rows backend memory (any backend; on a device the routing is host code over staged
// copies).
//
// The model owns its parameters, their gradients (same layout) and activations, all allocated at
// construction for B <= max_batch sequences of Tlen <= max_seq tokens, with `slots` copies of the
// activations so a pipeline can keep several micro-batches in flight. No step allocates.
// They are backend memory (device memory on a GPU; kinds Params, Grads, Activations): host code
// reads and writes them through Backend::upload / download.
//
// Memory savers (ModelOptions):
//   precision bf16/fp16: every activation and activation gradient is rounded to that precision
//             as it is written (backend/precision.hpp), the compute weights are rounded by
//             whoever writes them (the optimizer from its fp32 master); parameter gradients,
//             norm statistics, the attention state and the loss stay fp32. `storage` says how
//             the compute tensors are held: in 2 bytes (storage = precision, where the backend
//             stores() it: the backend rounds as it writes), or in fp32 containers that the
//             model rounds after each op (storage Fp32: the emulated path, the tests' oracle and
//             the GPU backend's way today). Both give the same bits: the rounding points are the
//             same, tensor-parallel partial sums included (rounded before they are summed, as a
//             2-byte message is).
//   recompute selective: the attention state (each row's log-sum-exp) and output are not kept
//             per layer; backward recomputes them from the kept qkv, one layer at a time.
//   recompute full: a slot keeps only each block's output (the next block's input); backward
//             recomputes the block's forward (tensor-parallel sums included) before its backward.
// Recomputation runs the same kernels on the same inputs, so losses and gradients are identical
// bit for bit to keeping everything.
//   lend_grads / lend_params (ZeRO-2 / ZeRO-3, train/sharded_units.hpp): the model holds no
//             whole gradient buffer (and no whole parameter buffer); a UnitLender lends it each
//             unit's (ParamLayout::units()) gradients, and parameters, while it computes that
//             unit, in the order the passes need them:
//               forward   wte, wpe | block l0 .. | lnf, head (lm_head or the tied wte)
//               backward  lnf, head | block .. l0 | wte, wpe   (grads; params but for wte, wpe)
//             grads_done(u) comes once the backward has written all of u's gradients: the tied
//             wte of a single-stage model (head and embedding) only after the embedding.
//
// Shapes: B batch, Tlen sequence, C d_model, hs head size; local (this rank's) counts: NHl query
// heads, NKVl kv heads, Fl = d_ff/tp, Vl = padded vocab/tp; N = B*Tlen rows.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/model/moe.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/parallel/context_chunks.hpp"
#include "mpitrain/parallel/ring_attention.hpp"

namespace mpitrain {

enum class Recompute { None, Selective, Full };
Recompute parse_recompute(const std::string& name);  // "none" | "selective" | "full"
std::string to_string(Recompute r);

struct ModelOptions {
  Precision precision = Precision::Fp32;
  Recompute recompute = Recompute::None;
  Precision storage = Precision::Fp32;  // Fp32, or precision itself (2-byte compute tensors)
  bool lend_grads = false;   // ZeRO-2/3: gradients lent per unit (set_lender)
  bool lend_params = false;  // ZeRO-3: parameters too
  bool sequence_parallel = false;  // with tp > 1: the norm/residual regions on N/tp rows
  // Mixture of experts (model/moe.hpp): the weights of the load-balancing aux loss and the router
  // z-loss in the objective (not in forward's returned cross-entropy; take_moe_stats reports them).
  float moe_aux_loss_coef = 0.001f, moe_z_loss_coef = 0.0f;
  MoeAuxLoss moe_aux_loss = MoeAuxLoss::PerLayer;  // the aux loss's form (model/moe.hpp)
  // With document starts given (forward's doc_starts): each token's position counts from its
  // document's first token (Megatron's reset_position_ids), for gpt2's wpe rows and RoPE alike.
  bool document_positions = false;
};

// The per-token loss gradients a training forward keeps for backward (0: none, as evaluation's):
// the cross-entropy's, per scored target, and the MoE losses', per token of the step. They differ
// where targets are unscored (--mask-boundary-loss, data/loss_mask.hpp): the loss is the mean
// over the scored targets, the MoE losses keep their weight per token. One value sets both.
template <typename T>
struct LossWeights {
  LossWeights(T both = 0) : scored(both), moe(both) {}  // NOLINT: implicit, a weight of both
  LossWeights(T scored_weight, T moe_weight) : scored(scored_weight), moe(moe_weight) {}
  T scored, moe;
};

// Who lends a unit's tensors to a Model under ZeRO-2/3. Pointers are to the unit's element 0
// (flat offset units()[u].lo); backward: the pass is a backward (params for recomputation and
// the input gradients).
template <typename T>
class UnitLender {
 public:
  virtual ~UnitLender() = default;
  // Unit u's parameters, whole, in the storage type; valid until params_done(u, backward).
  virtual CBuf<T> params(int u, bool backward) = 0;
  virtual void params_done(int u, bool backward) = 0;
  // Unit u's gradients for this micro-batch's backward, zeroed where backward adds to them
  // (added_gradient_ranges; the rest it writes over): the backward ops write into them until
  // grads_done(u).
  virtual T* grads(int u) = 0;
  virtual void grads_done(int u) = 0;
};

// Whether a Model's backward on this layout's stage writes the gradients of `slot` whole, with
// one matmul_backward, before anything adds to them: the blocks' linear layers, and the head on
// the last stage (the tied wte's embedding gradient is added after it).
bool backward_writes_whole(const ParamLayout& layout, Slot slot);
// The parts of r (a range of a stage's flat gradient buffer) whose tensors backward adds to, the
// rest it writes over; relative to r.lo. What Model::zero_grads and UnitLender::grads zero.
std::vector<FlatRange> added_gradient_ranges(const ParamLayout& layout, FlatRange r);

// Model::init's values, one tensor at a time: take(t, this rank's part of t, t.numel values on
// the host), for a caller that keeps them elsewhere (ZeRO-3's shards). T = float.
template <typename T>
void initial_tensors(const ModelConfig& config, const ParamLayout& layout, uint64_t seed,
                     const std::function<void(const ParamTensor&, const T*)>& take);

template <typename T>
class Model {
 public:
  // tp: the tensor-parallel group (null when shard.tp == 1).
  Model(const ModelConfig& config, Backend<T>& backend, const ModelShard& shard, int max_batch,
        int max_seq, int slots = 1, Communicator* tp = nullptr, const ModelOptions& options = {});
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  // Context parallelism (T = float): the model's Tlen rows of each sequence are the cp rank's
  // two chunks (parallel/context_chunks.hpp; max_seq = chunks.local_len()); RoPE and the
  // learned position embedding take their true positions, attention is a ring over cp
  // (parallel/ring_attention.hpp). The loss is this rank's tokens' sum, as without cp; an MoE
  // layer's routing statistics (aux / z losses, tokens per expert) are summed over cp
  // (set_routing_groups).
  void set_context_parallel(Communicator* cp, const ContextChunks& chunks);
  // Expert parallelism: the routed experts this shard holds (ModelShard::ep) are E/ep, the MoE
  // layers send each routed row to its expert's rank and back: the counts over ep (host
  // memory), the rows over ep_data (backend memory; null: ep itself, the CPU's).
  void set_expert_parallel(Communicator* ep, Communicator* ep_data = nullptr);
  // The host communicators over which MoE layers sum their routing statistics (host vectors):
  // tp (under sequence parallelism) and cp, the one place they are set. Until called: the tp
  // communicator given at construction (a host one only on the CPU), no cp.
  void set_routing_groups(Communicator* tp, Communicator* cp);
  // ZeRO-2/3: the lender of the tensors options() say are lent; it must outlive the passes.
  void set_lender(UnitLender<T>* lender) { lender_ = lender; }
  Backend<T>& backend() const { return backend_; }
  const ParamLayout& layout() const { return layout_; }
  // The compute copy of this rank's parameters, in the storage type; gradients are T. Null when
  // lent (lend_params, lend_grads).
  Buf<T> params() { return params_; }
  CBuf<T> params() const { return params_; }
  T* grads() { return grads_; }
  size_t num_params() const { return layout_.total(); }  // held by this rank
  const ModelOptions& options() const { return options_; }
  // Bytes of all activation slots and scratch: compute tensors in the storage type, the fp32
  // statistics beside them; the ring's buffers under context parallelism.
  size_t activation_bytes() const {
    return activation_count_ * element_bytes<T>(options_.storage) + stats_count_ * sizeof(T) +
           moe_router_.size() * sizeof(T) + moe_ids_.size() * sizeof(int32_t) + ring_bytes_;
  }
  // Bytes of the whole parameter and gradient buffers the model holds (0 for lent ones).
  size_t param_bytes() const {
    return options_.lend_params ? 0 : layout_.total() * element_bytes<T>(options_.storage);
  }
  size_t grad_bytes() const { return options_.lend_grads ? 0 : layout_.total() * sizeof(T); }

  // Deterministic initialisation from seed (not with lend_params: see initial_tensors): every
  // tensor of the whole model from its own RNG stream (seed, global tensor index), then this rank
  // keeps its part — so the values do not depend on the parallel layout. Matrices and embeddings ~ N(0, 0.02), output projections of
  // each block ~ N(0, 0.02/sqrt(2L)) (GPT-2), norm weights 1, biases 0, padded vocab rows 0.
  void init(uint64_t seed);

  // One micro-batch through this stage, in activation slot `slot`. tokens (B, Tlen) are read on
  // the first stage, targets on the last; a later stage's input must be in input(slot) first.
  // Returns the sum of the B*Tlen token losses on the last stage (0 elsewhere, or without
  // targets). With weights != 0 the loss gradient (weights.scored per scored target) is kept for
  // backward(), which weights the MoE losses by weights.moe per token.
  // doc_starts (B, Tlen), host memory, or null: each row's document's first position (document
  // masking: a row attends to none before it; backend.hpp's AttentionMask); backward is given the
  // same.
  double forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int Tlen,
                 LossWeights<T> weights, const int32_t* doc_starts = nullptr);
  // Adds this micro-batch's parameter gradients; the first backward after zero_grads writes the
  // linear layers' over (backward_writes_whole), as does every backward into lent unit buffers.
  // Before it, a stage that is not the last
  // must have the gradient of its output in output_grad(); after it, a stage that is not the
  // first finds the gradient of its input in input_grad(). If given, grads_ready(offset) is
  // called whenever every gradient at offsets >= offset is final for this backward.
  void backward(int slot, const int32_t* tokens, int B, int Tlen,
                const std::function<void(size_t)>& grads_ready = {},
                const int32_t* doc_starts = nullptr);
  // Starts a step's gradients: zeroes the tensors backward adds to and leaves the linear layers'
  // for the next backward to write over. Nothing when lent (the lender's).
  void zero_grads();
  // This stage's MoE layers' statistics accumulated over the forwards since the last call (not
  // the recomputations), then reset; empty for a dense model. Under tp each rank's are whole.
  std::vector<MoeLayerStats> take_moe_stats();
  // --moe-expert-bias (ModelConfig::moe_expert_bias): every MoE layer's router biases, the whole
  // model's on every rank (layer l's expert e at i n_experts + e, i = moe_layers(0, l)), which
  // the trainer updates after each step (update_expert_bias) and checkpoints keep; zeros at
  // first, empty for other models.
  std::vector<float>& expert_bias() { return expert_bias_; }
  // The all-layers aux loss (MoeAuxLoss::AllLayers): slot's micro-batch's rows routed to each
  // expert (E), summed over the model's MoE layers. forward sets it to this stage's layers' sum;
  // under pipeline parallelism the runner adds the earlier stages' after forward, and before a
  // backward of a stage that is not the last it sets the whole model's (the last stage's).
  std::span<int64_t> routed_counts(int slot) {
    return {routed_.data() + static_cast<size_t>(slot) * config_.n_experts,
            static_cast<size_t>(config_.n_experts)};
  }

  // Pipeline stage boundaries, (B, Tlen, C) each, in the storage type: this rank's
  // boundary_elements(B, Tlen) of them (sequence parallelism: its Ns rows).
  size_t boundary_elements(int B, int Tlen) const {
    return static_cast<size_t>(seq_rows(B * Tlen)) * config_.d_model;
  }
  Buf<T> input(int slot) { return slots_[slot].encoded; }
  CBuf<T> output(int slot) const { return slots_[slot].layers.back().res3; }
  Buf<T> output_grad() { return grad_.dres; }
  CBuf<T> input_grad() const { return grad_.dres; }

  // Gradients of the tensors replicated over tp, averaged over tp (no-op with tp = 1): keeps
  // the replicas' updates identical. The q/k norm weights' (partial sums over each rank's heads)
  // are summed, and so are the norms' under sequence parallelism (sums over each rank's rows). Call after the step's last backward and the data-parallel
  // sync. grads: compact over `held` (parallel/shard_ranges.hpp), e.g. grads() and
  // whole(num_params()); every tp rank holds the same ranges.
  void sync_replicated_grads(T* grads, const ShardRanges& held);
  // Sum of squared gradients of the tensors this rank counts for the global norm (primary),
  // over the held part (ZeRO: this rank's shard); grads compact over held. dense / experts:
  // whether the tensors other than the ep-split experts / those experts count here.
  double grad_square_sum(const T* grads, const ShardRanges& held, bool dense = true,
                         bool experts = true) const;

  // Logits of row n = b*Tlen + t after a forward without targets (single rank): Vp values, the
  // first V real; backend memory, in the storage type.
  CBuf<T> logits_row(int slot, int n) const {
    return slots_[slot].logits + static_cast<size_t>(n) * local_vocab_;
  }

 private:
  // Compute tensors are Buf (the storage type), statistics T* (fp32 or double).
  using B_ = Buf<T>;
  struct LayerActs {
    B_ ln1; T *ln1_mean, *ln1_rstd;  // (N,C) (N) (N)
    B_ qkv;                          // (N, (NHl+2NKVl)hs), after q/k norm and RoPE for llama
    B_ qkv_pre; T *qk_rstd;          // qk_norm only: (N,QKVl) before the q/k norm, (N,NHl+NKVl)
    B_ atty; T* probs;               // (N, NHl hs), attention_state_size (B,NHl,T): row lse
    B_ attproj, res2;                // (N,C), (N,C) = input + attproj
    B_ ln2; T *ln2_mean, *ln2_rstd;  // (N,C) (N) (N)
    B_ fch, fch_act;                 // (N, Fl or 2Fl), (N, Fl)
    B_ fcproj, res3;                 // (N,C), (N,C) = res2 + fcproj: the block's output
    MoeActs<T> moe;                  // an MoE layer's router and experts, on the Ns ln2 rows
  };
  struct SlotActs {
    B_ encoded;                      // (N,C) the stage's input (embedding output on stage 0)
    std::vector<LayerActs> layers;   // this stage's blocks
    B_ lnf; T *lnf_mean, *lnf_rstd;  // (N,C) (N) (N)   last stage only
    B_ logits;                       // (N, Vl)          last stage only; dlogits after forward
    T dloss = 0;                     // forward's weights.moe (the MoE losses' per token)
  };
  struct GradActs {
    B_ dres;                         // (N,C) gradient of the residual stream
    B_ dln;                          // (N,C) gradient at a norm's output
    B_ dqkv, datty; T* att_scratch;  // (N,QKVl), (N,NHl hs), attention_state_size
    B_ dfch, dfch_act;               // (N,Fl or 2Fl), (N,Fl)
    T *losses, *row_max, *ce_stats;  // (N), (N), (2N) cross-entropy scratch
  };

  // This rank's sizes for a (B, Tlen) batch: rows, width, local MLP width, head size, local
  // query / kv heads, qkv width, attention width, MLP hidden width (2F for SwiGLU), N*C.
  struct Dims {
    int N, C, F, hs, NH, NKV, QKV, A, FC;
    size_t NC;
  };
  Dims dims(int B, int Tlen) const;
  // Layer l's local dense MLP width (an MoE layer: its shared experts', maybe 0).
  int mlp_width(int l) const { return config_.dense_mlp_width(l) / layout_.shard().tp; }
  // A tensor in its unit's current buffer (the whole buffers', or lent).
  size_t in_unit(Slot slot, int layer) const {
    return layout_.offset(slot, layer) - layout_.units()[layout_.unit_of(slot, layer)].lo;
  }
  CBuf<T> p(Slot slot, int layer = -1) const {
    return unit_params_[layout_.unit_of(slot, layer)] + in_unit(slot, layer);
  }
  T* g(Slot slot, int layer = -1) {
    return unit_grads_[layout_.unit_of(slot, layer)] + in_unit(slot, layer);
  }
  // A lent unit taken before and given back after it is computed (no-ops when not lent).
  void take_params(int u, bool backward);
  void give_params(int u, bool backward);
  void take_grads(int u);  // also when already taken (the tied wte): nothing to do
  void give_grads(int u);
  // The units of the tensors the embedding (wte, wpe) and the head (lnf, head) use on this
  // stage, -1 where absent.
  std::array<int, 2> embedding_units() const;
  std::array<int, 2> head_units() const;
  CBuf<T> maybe_p(Slot slot, int layer = -1) const {
    return layout_.has(slot, layer) ? p(slot, layer) : nullptr;
  }
  T* maybe_g(Slot slot, int layer = -1) { return layout_.has(slot, layer) ? g(slot, layer) : nullptr; }
  // Biases of row-parallel layers are added once, by tp rank 0, before the all-reduce.
  CBuf<T> row_parallel_bias(Slot slot, int layer) const {
    return layout_.shard().tp_rank == 0 ? maybe_p(slot, layer) : nullptr;
  }
  Slot head_slot() const { return layout_.head_slot(); }  // on the last stage
  // How backward's matmul_backward writes the gradient of `slot`: over it on the first backward
  // after zero_grads and into every lent unit buffer, else added.
  GradWrite grad_write(Slot slot) const {
    const bool fresh = overwrite_grads_ || options_.lend_grads;
    return fresh && backward_writes_whole(layout_, slot) ? GradWrite::Overwrite : GradWrite::Add;
  }
  // The factor on q k^T in block l: 1/sqrt(hs), but for gpt2's two switches (config.hpp).
  T attention_scale(int l) const;
  RopeFreqs rope() const { return {config_.rope_theta, config_.rope_scaling}; }
  // Calls fn(first row, sequences, rows each, position of the first row) for each run of
  // consecutive positions among the B*Tlen rows: whole sequences without cp, each sequence's two
  // chunks with it; with document positions (doc_starts given and options_.document_positions),
  // each document's rows in each, from position 0.
  template <typename Fn>
  void for_position_runs(int B, int Tlen, const int32_t* doc_starts, Fn fn) const;
  // The document starts positions count from: doc_starts under document positions, else null.
  const int32_t* position_starts(const int32_t* doc_starts) const {
    return options_.document_positions ? doc_starts : nullptr;
  }
  // RoPE in place on qkv's q and k heads (backward: the inverse rotation), each row at its
  // position (for_position_runs'); rounded as stored.
  void apply_rope(Buf<T> qkv, int B, int Tlen, bool backward, const int32_t* doc_starts);
  // Attention of block l on a.qkv into a.atty and its state a.probs (the ring under cp), and
  // its backward into dqkv.
  void attention_forward(LayerActs& a, int l, int B, int Tlen, const AttentionMask& mask);
  void attention_backward(LayerActs& a, int l, int B, int Tlen, const AttentionMask& mask);
  void norm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, Slot w, Slot b, int layer, int N);
  void norm_backward(Buf<T> dinp, CBuf<T> dout, CBuf<T> inp, const T* mean, const T* rstd, Slot w,
                     Slot b, int layer, int N);
  // All-reduce of a compute tensor over tp (g in forward, f in backward): 2-byte messages under
  // 2-byte storage; the emulated path rounds the partial sums first, as those messages are.
  void tp_sum(Buf<T> x, size_t n);
  // Sequence parallelism (header): on, and the rows Ns of the sequence-parallel region of N rows.
  bool sp() const { return tp_ && options_.sequence_parallel; }
  int seq_rows(int N) const { return sp() ? N / layout_.shard().tp : N; }
  // Before a column-parallel layer: this rank's rows x (Ns,C), n = Ns*C, all-gathered into
  // gathered_ (N,C); without sequence parallelism x itself (already all N rows).
  CBuf<T> gather_rows(CBuf<T> x, size_t n);
  // Where a row-parallel layer (or the embedding) writes the partial sums that sum_rows reduces
  // into out: gathered_ under sequence parallelism, else out itself.
  Buf<T> partial_rows(Buf<T> out) const { return sp() ? gathered_ : out; }
  // Megatron's g (forward) / f (backward): the partial sums full (N,C) summed over tp into this
  // rank's rows out (Ns,C), n = Ns*C: a reduce-scatter, or without sequence parallelism tp_sum
  // in place (out == full).
  void sum_rows(Buf<T> full, Buf<T> out, size_t n);
  // A gradient of a tensor replicated over tp that is a partial sum (summed, not averaged).
  bool tp_partial_grad(Slot slot) const;
  bool emulated() const {
    return options_.precision != Precision::Fp32 && options_.storage == Precision::Fp32;
  }
  // The emulated path: x = round_to(x, precision) after an op wrote it (2-byte storage: the
  // backend has rounded it already).
  void lp(Buf<T> x, size_t n) {
    if (emulated()) backend_.round_to(x.full(), n, options_.precision);
  }
  // Block i of slot sa (global layer l) on input x(N,C): fills a, ends with a.res3. An MoE
  // layer adds its statistics into moe_stats when given (not when recomputing).
  void block_forward(LayerActs& a, CBuf<T> x, int l, int B, int Tlen, const AttentionMask& mask,
                     MoeLayerStats* moe_stats);
  // The MLP half of block l's backward: the gradient at ln2's output from d res3 (grad_.dres)
  // into dln_rows (Ns,C).
  void mlp_backward(LayerActs& a, int l, int B, int Tlen, Buf<T> dln_rows, T dloss,
                    const double* pooled);
  double loss(SlotActs& a, const int32_t* targets, int N, T dloss);

  ModelConfig config_;
  ModelOptions options_;
  ParamLayout layout_;
  Backend<T>& backend_;
  Communicator* tp_;
  std::unique_ptr<RingAttention> ring_;  // context parallelism only
  std::vector<int> positions_;           // its rows' sequence positions (Tlen), or empty
  size_t ring_bytes_ = 0;
  int max_batch_, max_seq_;
  int n_local_heads_, n_local_kv_heads_, local_ff_, local_vocab_, vocab_start_;
  Buf<T> params_;
  T* grads_ = nullptr;
  std::vector<FlatRange> added_;  // the ranges of grads_ backward adds to: what zero_grads zeroes
  bool overwrite_grads_ = false;  // zero_grads has run and no backward since
  UnitLender<T>* lender_ = nullptr;
  std::vector<CBuf<T>> unit_params_;  // per unit: where its element 0 is now
  std::vector<T*> unit_grads_;
  Buf<T> acts_;        // one block holding every compute activation buffer
  T* stats_ = nullptr;  // and one for their fp32 statistics and scratch
  size_t activation_count_ = 0, stats_count_ = 0;
  Buf<T> gathered_;  // (N,C) sequence parallelism's gathers and partial sums; null without
  std::vector<SlotActs> slots_;
  GradActs grad_;
  mutable std::vector<Segment> norm_segments_;  // grad_square_sum's list, refilled each step
  std::unique_ptr<MoeLayer<T>> moe_;         // null for a dense stage
  std::vector<T> moe_router_;                // the MoE layers' router state and host scratch
  std::vector<int32_t> moe_ids_;             // the MoE layers' kept indices (MoeActs' int32)
  std::vector<MoeLayerStats> moe_stats_;     // this stage's MoE layers', since the last take
  std::vector<float> expert_bias_;           // expert_bias()
  std::vector<int64_t> routed_;              // (slots, E) routed_counts
  std::vector<double> pooled_;               // (E) backward: the all-layers aux weights C_e / L^2
};

}  // namespace mpitrain
