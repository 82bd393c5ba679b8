// A decoder-only Transformer (GPT-2 or Llama) with explicit forward and backward, as in llm.c.
//
// The model owns three flat buffers from its backend: parameters, their gradients (same layout,
// see params.hpp) and activations, all sized at construction for B <= max_batch sequences of
// Tlen <= max_seq tokens, so no step allocates. forward() keeps what backward() needs.
//
// Shapes: B batch, Tlen sequence, C d_model, NH/NKV heads, hs head size, F d_ff, Vp padded vocab,
// N = B*Tlen rows.
#pragma once

#include <cstdint>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/model/params.hpp"

namespace mpitrain {

template <typename T>
class Model {
 public:
  Model(const ModelConfig& config, Backend<T>& backend, int max_batch, int max_seq);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  T* params() { return params_; }
  const T* params() const { return params_; }
  T* grads() { return grads_; }
  size_t num_params() const { return layout_.total(); }

  // Deterministic initialisation from seed: every tensor from its own RNG stream (seed, tensor
  // index), so the values do not depend on how the model is later split across ranks.
  // Matrices and embeddings ~ N(0, 0.02), output projections of each block ~ N(0, 0.02/sqrt(2L))
  // (GPT-2), norm weights 1, biases 0, padded vocabulary rows 0.
  void init(uint64_t seed);

  // tokens, targets: (B, Tlen). Returns the sum of the B*Tlen per-token losses (0 when targets
  // is null: logits only). With dloss != 0 the loss gradient, scaled by dloss per token, is left
  // in place for backward().
  double forward(const int32_t* tokens, const int32_t* targets, int B, int Tlen, T dloss);
  // Accumulates d(sum of losses * dloss) / d(params) into grads(); needs the forward just done.
  void backward(const int32_t* tokens, int B, int Tlen);
  void zero_grads();

  // Logits of row n = b*Tlen + t after a forward without targets: Vp values (first V are real).
  const T* logits_row(int n) const { return logits_ + static_cast<size_t>(n) * config_.padded_vocab(); }

 private:
  struct LayerActs {
    T *ln1, *ln1_mean, *ln1_rstd;  // (N,C) (N) (N)
    T *qkv;                        // (N, (NH+2NKV)hs), after RoPE for llama
    T *atty, *probs;               // (N, NH hs), (B,NH,T,T)
    T *attproj, *res2;             // (N,C), (N,C) = input + attproj
    T *ln2, *ln2_mean, *ln2_rstd;  // (N,C) (N) (N)
    T *fch, *fch_act;              // (N,F or 2F), (N,F)
    T *fcproj, *res3;              // (N,C), (N,C) = res2 + fcproj: the block's output
  };
  struct GradActs {
    T *dres;                       // (N,C) gradient of the residual stream
    T *dln;                        // (N,C) gradient at a norm's output
    T *dqkv, *datty, *att_scratch; // (N,QKV), (N,NH hs), (B,NH,T,T)
    T *dfch, *dfch_act;            // (N,F or 2F), (N,F)
  };

  const T* p(Slot slot, int layer = -1) const { return params_ + layout_.offset(slot, layer); }
  T* g(Slot slot, int layer = -1) { return grads_ + layout_.offset(slot, layer); }
  const T* maybe_p(Slot slot, int layer = -1) const {
    return layout_.has(slot, layer) ? p(slot, layer) : nullptr;
  }
  T* maybe_g(Slot slot, int layer = -1) { return layout_.has(slot, layer) ? g(slot, layer) : nullptr; }
  void norm_forward(T* out, T* mean, T* rstd, const T* inp, Slot w, Slot b, int layer, int N);
  void norm_backward(T* dinp, const T* dout, const T* inp, const T* mean, const T* rstd, Slot w,
                     Slot b, int layer, int N);
  const T* head_weight() const { return p(config_.tied_embeddings() ? Slot::Wte : Slot::LmHead); }
  T* head_grad() { return g(config_.tied_embeddings() ? Slot::Wte : Slot::LmHead); }

  ModelConfig config_;
  ParamLayout layout_;
  Backend<T>& backend_;
  int max_batch_, max_seq_;
  T* params_ = nullptr;
  T* grads_ = nullptr;
  T* acts_ = nullptr;  // one block holding every activation buffer below
  T *encoded_, *lnf_, *lnf_mean_, *lnf_rstd_, *logits_, *losses_;
  std::vector<LayerActs> layers_;
  GradActs grad_;
};

}  // namespace mpitrain
