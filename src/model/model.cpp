#include "mpitrain/model/model.hpp"

#include <cmath>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

template <typename T>
Model<T>::Model(const ModelConfig& config, Backend<T>& backend, int max_batch, int max_seq)
    : config_(config), layout_(config), backend_(backend), max_batch_(max_batch), max_seq_(max_seq) {
  config_.validate();
  if (max_seq > config_.max_seq_len)
    throw UsageError("seq-len " + std::to_string(max_seq) + " exceeds the model's " +
                     std::to_string(config_.max_seq_len) + " positions");
  const size_t N = static_cast<size_t>(max_batch) * max_seq;
  const size_t C = config_.d_model, F = config_.d_ff, Vp = config_.padded_vocab();
  const size_t QKV = config_.qkv_width(), A = static_cast<size_t>(config_.n_head) * config_.head_size();
  const size_t FC = config_.arch == Arch::Llama ? 2 * F : F;
  const size_t P = static_cast<size_t>(max_batch) * config_.n_head * max_seq * max_seq;
  const size_t L = config_.n_layer;

  // One allocation for all activations, carved in the order the header lists them.
  const size_t per_layer = 6 * N * C + 4 * N + N * QKV + N * A + P + N * FC + N * F;
  const size_t forward_acts = N * C + L * per_layer + N * C + 2 * N + N * Vp + N;
  const size_t grad_acts = 2 * N * C + N * QKV + N * A + P + N * FC + N * F;
  const size_t total = forward_acts + grad_acts;
  acts_ = backend_.alloc(total);
  T* cursor = acts_;
  auto take = [&](size_t n) { T* ptr = cursor; cursor += n; return ptr; };
  encoded_ = take(N * C);
  layers_.resize(L);
  for (auto& a : layers_) {
    a.ln1 = take(N * C); a.ln1_mean = take(N); a.ln1_rstd = take(N);
    a.qkv = take(N * QKV);
    a.atty = take(N * A); a.probs = take(P);
    a.attproj = take(N * C); a.res2 = take(N * C);
    a.ln2 = take(N * C); a.ln2_mean = take(N); a.ln2_rstd = take(N);
    a.fch = take(N * FC); a.fch_act = take(N * F);
    a.fcproj = take(N * C); a.res3 = take(N * C);
  }
  lnf_ = take(N * C); lnf_mean_ = take(N); lnf_rstd_ = take(N);
  logits_ = take(N * Vp); losses_ = take(N);
  grad_.dres = take(N * C); grad_.dln = take(N * C);
  grad_.dqkv = take(N * QKV); grad_.datty = take(N * A); grad_.att_scratch = take(P);
  grad_.dfch = take(N * FC); grad_.dfch_act = take(N * F);
  if (cursor != acts_ + total) MPITRAIN_THROW("activation layout does not add up");

  params_ = backend_.alloc(layout_.total());
  grads_ = backend_.alloc(layout_.total());
}

template <typename T>
Model<T>::~Model() {
  backend_.free(grads_);
  backend_.free(params_);
  backend_.free(acts_);
}

template <typename T>
void Model<T>::zero_grads() {
  backend_.zero(grads_, layout_.total());
}

template <typename T>
void Model<T>::norm_forward(T* out, T* mean, T* rstd, const T* inp, Slot w, Slot b, int layer,
                            int N) {
  const int C = config_.d_model;
  if (config_.arch == Arch::Gpt2)
    backend_.layernorm_forward(out, mean, rstd, inp, p(w, layer), p(b, layer), N, C,
                               static_cast<T>(config_.norm_eps));
  else
    backend_.rmsnorm_forward(out, rstd, inp, p(w, layer), N, C, static_cast<T>(config_.norm_eps));
}

template <typename T>
void Model<T>::norm_backward(T* dinp, const T* dout, const T* inp, const T* mean, const T* rstd,
                             Slot w, Slot b, int layer, int N) {
  const int C = config_.d_model;
  if (config_.arch == Arch::Gpt2)
    backend_.layernorm_backward(dinp, g(w, layer), g(b, layer), dout, inp, p(w, layer), mean, rstd,
                                N, C);
  else
    backend_.rmsnorm_backward(dinp, g(w, layer), dout, inp, p(w, layer), rstd, N, C);
}

template <typename T>
double Model<T>::forward(const int32_t* tokens, const int32_t* targets, int B, int Tlen, T dloss) {
  if (B > max_batch_ || Tlen > max_seq_) MPITRAIN_THROW("batch larger than the model was sized for");
  const ModelConfig& c = config_;
  const int N = B * Tlen, C = c.d_model, F = c.d_ff, hs = c.head_size(), NH = c.n_head,
            NKV = c.n_kv_head, QKV = c.qkv_width(), A = NH * hs, Vp = c.padded_vocab();
  const bool llama = c.arch == Arch::Llama;
  const int FC = llama ? 2 * F : F;

  backend_.embedding_forward(encoded_, tokens, p(Slot::Wte), maybe_p(Slot::Wpe), B, Tlen, C);
  const T* x = encoded_;  // (N,C) the residual stream entering each block
  for (int l = 0; l < c.n_layer; ++l) {
    LayerActs& a = layers_[l];
    // attention half: res2 = x + proj(attn(norm(x)))
    norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, Slot::Ln1W, Slot::Ln1B, l, N);
    backend_.matmul_forward(a.qkv, a.ln1, p(Slot::QkvW, l), maybe_p(Slot::QkvB, l), N, C, QKV);
    if (llama) backend_.rope_forward(a.qkv, B, Tlen, NH, NKV, hs, static_cast<T>(c.rope_theta));
    backend_.attention_forward(a.atty, a.probs, a.qkv, B, Tlen, NH, NKV, hs);
    backend_.matmul_forward(a.attproj, a.atty, p(Slot::ProjW, l), maybe_p(Slot::ProjB, l), N, A, C);
    backend_.add(a.res2, x, a.attproj, static_cast<size_t>(N) * C);
    // MLP half: res3 = res2 + proj(act(fc(norm(res2))))
    norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, Slot::Ln2W, Slot::Ln2B, l, N);
    backend_.matmul_forward(a.fch, a.ln2, p(Slot::FcW, l), maybe_p(Slot::FcB, l), N, C, FC);
    if (llama)
      backend_.swiglu_forward(a.fch_act, a.fch, N, F);
    else
      backend_.gelu_forward(a.fch_act, a.fch, static_cast<size_t>(N) * F);
    backend_.matmul_forward(a.fcproj, a.fch_act, p(Slot::FcProjW, l), maybe_p(Slot::FcProjB, l), N,
                            F, C);
    backend_.add(a.res3, a.res2, a.fcproj, static_cast<size_t>(N) * C);
    x = a.res3;
  }
  norm_forward(lnf_, lnf_mean_, lnf_rstd_, x, Slot::LnfW, Slot::LnfB, -1, N);
  backend_.matmul_forward(logits_, lnf_, head_weight(), nullptr, N, C, Vp);
  if (targets == nullptr) return 0.0;
  return backend_.crossentropy(logits_, losses_, targets, N, c.vocab_size, Vp, dloss);
}

template <typename T>
void Model<T>::backward(const int32_t* tokens, int B, int Tlen) {
  const ModelConfig& c = config_;
  const int N = B * Tlen, C = c.d_model, F = c.d_ff, hs = c.head_size(), NH = c.n_head,
            NKV = c.n_kv_head, QKV = c.qkv_width(), A = NH * hs, Vp = c.padded_vocab();
  const bool llama = c.arch == Arch::Llama;
  const int FC = llama ? 2 * F : F;
  GradActs& d = grad_;

  // head: logits now hold dlogits (left by forward's crossentropy)
  backend_.matmul_backward(d.dln, head_grad(), nullptr, logits_, lnf_, head_weight(), N, C, Vp);
  backend_.zero(d.dres, static_cast<size_t>(N) * C);
  const T* last = layers_.back().res3;
  norm_backward(d.dres, d.dln, last, lnf_mean_, lnf_rstd_, Slot::LnfW, Slot::LnfB, -1, N);

  for (int l = c.n_layer - 1; l >= 0; --l) {
    LayerActs& a = layers_[l];
    const T* x = l == 0 ? encoded_ : layers_[l - 1].res3;
    // MLP half: d res3 flows to res2 unchanged (dres) and into the MLP branch
    backend_.matmul_backward(d.dfch_act, g(Slot::FcProjW, l), maybe_g(Slot::FcProjB, l), d.dres,
                             a.fch_act, p(Slot::FcProjW, l), N, F, C);
    if (llama)
      backend_.swiglu_backward(d.dfch, a.fch, d.dfch_act, N, F);
    else
      backend_.gelu_backward(d.dfch, a.fch, d.dfch_act, static_cast<size_t>(N) * F);
    backend_.matmul_backward(d.dln, g(Slot::FcW, l), maybe_g(Slot::FcB, l), d.dfch, a.ln2,
                             p(Slot::FcW, l), N, C, FC);
    norm_backward(d.dres, d.dln, a.res2, a.ln2_mean, a.ln2_rstd, Slot::Ln2W, Slot::Ln2B, l, N);
    // attention half: dres is now d res2; it flows to x unchanged and into the attention branch
    backend_.matmul_backward(d.datty, g(Slot::ProjW, l), maybe_g(Slot::ProjB, l), d.dres, a.atty,
                             p(Slot::ProjW, l), N, A, C);
    backend_.attention_backward(d.dqkv, d.att_scratch, d.datty, a.qkv, a.probs, B, Tlen, NH, NKV,
                                hs);
    if (llama) backend_.rope_backward(d.dqkv, B, Tlen, NH, NKV, hs, static_cast<T>(c.rope_theta));
    backend_.matmul_backward(d.dln, g(Slot::QkvW, l), maybe_g(Slot::QkvB, l), d.dqkv, a.ln1,
                             p(Slot::QkvW, l), N, C, QKV);
    norm_backward(d.dres, d.dln, x, a.ln1_mean, a.ln1_rstd, Slot::Ln1W, Slot::Ln1B, l, N);
  }
  backend_.embedding_backward(g(Slot::Wte), maybe_g(Slot::Wpe), d.dres, tokens, B, Tlen, C);
}

template class Model<float>;
template class Model<double>;

}  // namespace mpitrain
