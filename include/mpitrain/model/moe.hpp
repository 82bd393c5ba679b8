// One mixture-of-experts MLP, forward and backward (the math below), for the R rows of an MoE
// layer's input x (the ln2 output: this rank's rows), on any backend.
//
//   router   z = x Wr^T (R,E) from the stored x and Wr, then in T (fp32): the scores p = softmax(z)
//            or (MoeRouting::sigmoid) s = sigmoid(z) per expert; lse = logsumexp(z) either way
//   top-k    the K largest scores of each row (sigmoid with an expert bias b: of s + b), ties to
//            the lower expert index; with G groups (MoeRouting::groups, consecutive E/G experts)
//            among the experts of the row's M best groups only (group_topk), a group's worth
//            the sum of its top K/M keys (Megatron-Core's group_limited_topk; DeepSeek-V3's
//            top 2 for its K 8, M 4), ties to the lower group; gates g = c x score / sum of
//            the chosen scores (norm_topk; sigmoid: + 1e-20 as Megatron-Core), else c x score,
//            c = MoeRouting::scale
//   dispatch the R*K assignments (r,k) sorted stably by expert: expert e's rows are the
//            contiguous slots [offset[e], offset[e+1]); xs (RK,C) = x's row of each slot
//   experts  per expert, one matmul over its rows: h = xs We1^T (n_e,2Fe), a = swiglu(h) (n_e,Fe),
//            y = a We2^T (n_e,C): dropless, no capacity, no padding
//   combine  out[r] (+)= sum_k g[r,k] y[slot(r,k)]; with a shared experts' gate (qwen2_moe's
//            shared_expert_gate, Megatron-Core's moe_shared_expert_gate) out[r] = t_r out[r] +
//            the routed sum, t_r = sigmoid(x[r] . wg), out holding the shared experts' output
//   losses   aux = E sum_e f_e P_e (f_e = counts[e]/R, P_e = mean_r p[r,e]; HF Mixtral's
//            load_balancing_loss_func; sigmoid: P_e = mean_r s[r,e] / (sum_e s[r,e] + 1e-20), as
//            Megatron-Core's aux scores; with an expert bias or groups f_e counts the top k of
//            the scores alone, as Megatron-Core's and DeepSeek-V3's balance losses),
//            z = mean_r lse_r^2 (ST-MoE); over the rows R_all of the
//            whole micro-batch: their sums all-reduced over the tp group under sequence
//            parallelism, then over the cp group (Megatron's tp x cp statistics). Their gradient
//            enters backward weighted by R_all x dloss (the micro-batch's share of the step's
//            mean), each rank differentiating its own R rows.
//            The aux loss has two forms (MoeAuxLoss). PerLayer: each layer's own, as above, the
//            model's objective their sum (as Megatron-Core's aux_loss, whose f_e also divides by
//            K: its coefficient c is c / K here). AllLayers: one loss over the L MoE layers'
//            routing pooled, as transformers' load_balancing_loss_func takes the concatenated
//            router logits of all layers: aux = E sum_e (C_e / (L R)) (S_e / (L R)) with C_e
//            the rows routed to e and S_e the sum of p[r,e], both over all layers. Layer
//            l's share is E sum_e w_e S_le / R^2 with w_e = C_e / L^2 (so the shares sum to it),
//            and its gradient that of PerLayer with counts[e] replaced by w_e: backward takes w
//            (the Model sums C over its layers, a pipeline over the stages) and adds the share.
// Where it runs: the router, top-k, sort, gather, combine and their backward are host code on
// host T buffers (MoeActs' statistics and indices, the scratch); the experts' matmuls and
// SwiGLU are backend ops on backend memory. On a host-memory backend (the CPU) the host code
// reads and writes fp32 tensors in place; on a device (--device cuda) every tensor it touches
// goes through Backend::download / upload: x, Wr, y, xs, out and the gradients of y, xs, x and
// Wr, so each pass moves the R input rows and the R K routed rows between device and host a few
// times each. The CPU runs the same code; with MPITRAIN_MOE_STAGED=1 it takes the device's
// copies too (tests).
// Compute tensors (xs, h, a, y and their gradients) are in the storage type and rounded where
// the dense MLP rounds (`emulate`: the emulated path's precision, Fp32 = nothing to round);
// everything of the router is T.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/expert_dispatch.hpp"

namespace mpitrain {

// The load-balancing loss's form (the header): "per-layer" | "all-layers".
enum class MoeAuxLoss { PerLayer, AllLayers };
// UsageError for another (naming auto too, the option's value that start-up resolves to one).
MoeAuxLoss parse_moe_aux_loss(const std::string& name);

// How the router turns logits into choices and gates (the header; ModelConfig's moe_ fields).
struct MoeRouting {
  bool sigmoid = false;   // scores sigmoid(z) per expert, else the softmax over all
  bool norm_topk = true;  // the gates renormalised over the chosen
  float scale = 1;        // every gate times this
  int groups = 1;         // group-limited routing: the experts in this many groups (1: none)
  int group_topk = 0;     // of which each row chooses from this many
  bool shared_gate = false;  // the shared experts' output times sigmoid(x wg) (qwen2_moe)
};

// Aux-loss-free balancing (DeepSeek-V3; Megatron-Core's get_updated_expert_bias): one MoE layer's
// biases (E) after a step whose routing sent tokens[e] rows to expert e over the whole job:
// b_e += rate x sign(mean_e tokens - tokens[e]), in float; an expert at the mean keeps its b.
void update_expert_bias(float* bias, const std::vector<int64_t>& tokens, float rate);

// One MoE layer's load statistics (Model::take_moe_stats).
struct MoeLayerStats {
  int layer;                               // global layer index
  double aux_loss = 0, z_loss = 0;         // summed over the micro-batches since the last take
  std::vector<int64_t> tokens_per_expert;  // (E) rows routed to each expert (sum = R*K per mb)
  int64_t rows = 0;                        // R summed over those micro-batches
};

// What one MoE layer keeps from forward for backward (one activation slot's), carved by the
// Model: `acts` compute-tensor elements (backend memory), `stats` T and `ids` int32 (host
// memory; the sizes below).
template <typename T>
struct MoeActs {
  T* logits = nullptr;         // (R,E) router logits z
  T* probs = nullptr;          // (R,E) the scores: softmax(z), or sigmoid(z)
  T* lse = nullptr;            // (R) log-sum-exp of each row of z
  T* gates = nullptr;          // (R,K) the chosen experts' gates (the header)
  T* prob_sums = nullptr;      // (E) sum of P's scores [r,e] over the R_all rows (AllLayers')
  T* shared_gate = nullptr;    // (R) MoeRouting::shared_gate: sigmoid(x wg) of each row
  T* shared_y = nullptr;       // (R,C) the shared experts' output it multiplied
  int32_t* experts = nullptr;  // (R,K) the chosen experts, by descending score (ties: lower index)
  int32_t* slot_of = nullptr;  // (R*K) the sorted slot of assignment r*K+k
  int32_t* offsets = nullptr;  // (E+1) expert e's slots [offsets[e], offsets[e+1])
  int32_t* counts = nullptr;   // (E+1) the aux loss's constants: rows routed to each expert
                               // (with an expert bias or groups: the scores' own top k's) over
                               // all tp x cp ranks, then R_all (their rows)
  Buf<T> xs, h, a, y;          // (RK,C) (RK,2Fe) (RK,Fe) (RK,C)
};

template <typename T>
class MoeLayer {
 public:
  // R_max: the most rows a call gets. stats_group: the tp group under sequence parallelism (the
  // statistics' sums all-reduced over it), else null.
  MoeLayer(Backend<T>& backend, int n_experts, int top_k, MoeRouting routing, int d_model,
           int expert_width, int R_max, float aux_coef, float z_coef, MoeAuxLoss aux_form,
           Precision emulate, Communicator* stats_group);

  // Sizes of one layer's kept MoeActs for R rows (compute elements; host T, host int32).
  static size_t kept_acts(size_t R, int K, int C, int Fe);
  static size_t kept_stats(size_t R, int E, int K, int C, bool shared_gate);
  static size_t kept_ids(size_t R, int E, int K);
  // Sizes of the scratch shared by every layer (compute elements; host T): set_scratch's.
  static size_t scratch_acts(size_t R, int K, int C, int Fe);
  static size_t scratch_stats(size_t R, int E, int K, int C);
  // Carves a's buffers from the three cursors (advanced), and the scratch likewise.
  void carve(MoeActs<T>& a, Buf<T>& acts, T*& stats, int32_t*& ids) const;
  void set_scratch(Buf<T> acts, T* stats);

  // out (R,C): = the routed output, or += it when add (the shared experts' output is there;
  // with MoeRouting::shared_gate, first multiplied by each row's sigmoid(x wg), wg (C)).
  // x (R,C) the layer's input; wr (E,C), w1 (E,2Fe,C), w2 (E,C,Fe); expert_bias (E) the
  // sigmoid router's biases, null: none. Adds this call's statistics into stats when given (not
  // when recomputing): all but AllLayers' aux loss (backward's).
  void forward(MoeActs<T>& a, Buf<T> out, bool add, CBuf<T> x, CBuf<T> wr, CBuf<T> wg, CBuf<T> w1,
               CBuf<T> w2, const float* expert_bias, int R, MoeLayerStats* stats);
  // MoeRouting::shared_gate: dshared (R,C) = the gradient of the shared experts' output, each
  // row of dout times its gate (before backward, which adds the gate's own gradients).
  void shared_gate_backward(const MoeActs<T>& a, CBuf<T> dout, Buf<T> dshared, int R);
  // dx (R,C): = the gradient of x, or += it when add; dout (R,C) the gradient of out; parameter
  // gradients added into dwr, dwg (the shared gate's; null without), dw1, dw2. dloss: the
  // per-token loss gradient of forward (weights the aux and z losses, as the header says).
  // AllLayers: pooled (E) holds w_e = C_e / L^2, and the layer's share of the aux loss is added
  // into stats (null: not counted).
  void backward(const MoeActs<T>& a, Buf<T> dx, bool add, CBuf<T> dout, CBuf<T> x, CBuf<T> wr,
                CBuf<T> wg, CBuf<T> w1, CBuf<T> w2, T* dwr, T* dwg, T* dw1, T* dw2, int R, T dloss,
                const double* pooled, MoeLayerStats* stats);

  // The host communicators the statistics' sums are all-reduced over: tp under sequence
  // parallelism (else null), then cp (null or size 1: none), whose ranks hold the other chunks
  // of the same sequences. Until called: the constructor's stats_group, no cp.
  void set_statistics_groups(Communicator* tp, Communicator* cp);

  // Expert parallelism (ep size > 1; null or size 1: every expert here): w1 / w2 / dw1 / dw2
  // then hold this rank's E/ep experts, and the routed rows go to their owners and back
  // (model/expert_dispatch.hpp): the counts over ep (host memory), the rows over ep_data (the
  // group's communicator for backend memory: ep itself on the CPU). The statistics stay this
  // rank's. Allocates the owners' buffers for the most rows a rank can receive
  // (ep x R_max x K) and the exchange's staging; after set_scratch.
  void set_expert_parallel(Communicator* ep, Communicator* ep_data);

 private:
  // x as T on the host: its own elements (fp32 in host memory) or downloaded into scratch.
  const T* host(CBuf<T> x, size_t n, T* scratch);
  // Where host code writes what goes into x: x's own elements (fp32 in host memory), else
  // scratch (then store puts it into x).
  T* host_target(Buf<T> x, T* scratch) const;
  // dst = src (n; nothing to copy when src is dst's own elements), rounded as stored.
  void store(Buf<T> dst, const T* src, size_t n);
  void round(Buf<T> x, size_t n);
  // probs, lse, experts, gates of R rows from logits (bias: the expert bias, or null).
  void route(MoeActs<T>& a, const float* bias, int R);
  // Whether the aux loss counts another top k than the routing's: the scores' own where a bias
  // or groups take part in the choice.
  bool aux_counts_apart(const float* bias) const { return bias || routing_.groups > 1; }
  void experts_forward(const int32_t* offsets, int n, CBuf<T> xs, Buf<T> h, Buf<T> act, Buf<T> y,
                       CBuf<T> w1, CBuf<T> w2);
  void experts_backward(const int32_t* offsets, int n, Buf<T> dy, Buf<T> da, Buf<T> dh,
                        CBuf<T> xs, CBuf<T> h, CBuf<T> act, CBuf<T> w1, CBuf<T> w2, T* dw1,
                        T* dw2);
  void plan_dispatch(const int32_t* offsets);

  Backend<T>& backend_;
  bool host_memory_;  // the backend's memory is host memory: host code reads it in place
  int E_, K_, C_, Fe_, R_max_;
  MoeRouting routing_;
  T aux_coef_, z_coef_;
  MoeAuxLoss aux_form_;
  Precision emulate_;
  Communicator* stats_group_;
  Communicator* cp_ = nullptr;
  std::vector<double> sums_;   // (3E+2) counts, sums of p, sum of lse^2, rows, the scores' own
                               // top k's counts (aux_counts_apart): all-reduced at once
  std::vector<int32_t> next_;  // (E) dispatch: each expert's next free slot
  std::vector<T> aux_weights_;  // (E) backward: the aux loss's w (counts, or pooled)
  // group-limited routing (groups > 1): each row's group worths (R_max,G) and chosen groups
  // (R_max,group_topk)
  std::vector<T> group_worth_;
  std::vector<int32_t> group_chosen_;
  std::vector<T> wgh_, dwgh_;  // shared_gate: wg and its gradient on the host (a device's copies)
  // scratch (set_scratch): compute tensors dy/dxs (RK,C), da (RK,Fe), dh (RK,2Fe); host T
  // buffers xh (R,C), wh (E,C), yh (RK,C), oh (R,C), dxh (R,C), dz (R,E), dg (R,K), dwh (E,C)
  Buf<T> dy_, da_, dh_;
  T *xh_ = nullptr, *wh_ = nullptr, *yh_ = nullptr, *oh_ = nullptr, *dxh_ = nullptr,
    *dz_ = nullptr, *dg_ = nullptr, *dwh_ = nullptr;
  // Expert parallelism: the exchange, and the owners' rows (cap = ep R_max K): xs, y / dy / dxs
  // (cap,C), h, dh (cap,2Fe), a, da (cap,Fe), the exchange's staging (cap,C), in one backend
  // allocation freed with this layer.
  std::unique_ptr<ExpertDispatch> dispatch_;
  std::unique_ptr<void, std::function<void(void*)>> ep_buffers_;
  Buf<T> ep_xs_, ep_y_, ep_h_, ep_a_, ep_dh_, ep_da_;
  std::vector<int64_t> counts_;         // (E) this micro-batch's rows per expert
  std::vector<int32_t> local_offsets_;  // (E/ep + 1) this rank's experts in the received rows
};

}  // namespace mpitrain
