#include "mpitrain/backend/profiling_backend.hpp"

#include <algorithm>
#include <chrono>
#include <vector>
#include <utility>

namespace mpitrain {

namespace {

using T = float;
constexpr double kT = sizeof(T);  // bytes of a T* operand

template <class B>
double bytes_of(const B& b) {  // bytes of one element of a Buf / CBuf, 0 for a null one
  return b ? static_cast<double>(b.element_size()) : 0.0;
}

}  // namespace

ProfilingBackend::ProfilingBackend(std::unique_ptr<Backend<T>> inner, OpProfile& profile)
    : inner_(std::move(inner)), profile_(profile) {}

template <class F>
decltype(auto) ProfilingBackend::timed(OpPhase phase, const char* op, double flops, double bytes,
                                       F&& f) {
  struct Record {  // on the way out, the result returned or an exception thrown
    OpProfile& profile;
    OpPhase phase;
    const char* op;
    double flops, bytes;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Record() {
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      profile.record(phase, op, s, flops, bytes);
    }
  } record{profile_, phase, op, flops, bytes};
  return f();
}

// ---- memory: n elements moved, read and written ---------------------------------------------
void ProfilingBackend::zero(Buf<T> x, size_t n) {
  timed(OpPhase::Memory, "zero", 0, n * bytes_of(x), [&] { inner_->zero(x, n); });
}
void ProfilingBackend::copy(Buf<T> dst, CBuf<T> src, size_t n) {
  timed(OpPhase::Memory, "copy", 0, n * (bytes_of(dst) + bytes_of(src)),
        [&] { inner_->copy(dst, src, n); });
}
void ProfilingBackend::convert(Buf<T> dst, CBuf<T> src, size_t n) {
  timed(OpPhase::Memory, "convert", 0, n * (bytes_of(dst) + bytes_of(src)),
        [&] { inner_->convert(dst, src, n); });
}
void ProfilingBackend::round_to(T* x, size_t n, Precision p) {
  timed(OpPhase::Memory, "round_to", 0, 2 * kT * n, [&] { inner_->round_to(x, n, p); });
}
void ProfilingBackend::upload(Buf<T> dst, const T* host_src, size_t n) {
  timed(OpPhase::Memory, "upload", 0, n * (kT + bytes_of(dst)),
        [&] { inner_->upload(dst, host_src, n); });
}
void ProfilingBackend::download(T* host_dst, CBuf<T> src, size_t n) {
  timed(OpPhase::Memory, "download", 0, n * (kT + bytes_of(src)),
        [&] { inner_->download(host_dst, src, n); });
}

// ---- matmul: 2 N IC OC FLOPs a product ---------------------------------------------------
void ProfilingBackend::matmul_forward(Buf<T> out, CBuf<T> inp, CBuf<T> weight, CBuf<T> bias, int N,
                                      int IC, int OC) {
  const double n = N, ic = IC, oc = OC;
  timed(OpPhase::Forward, "matmul_forward", 2 * n * ic * oc,
        n * ic * bytes_of(inp) + oc * ic * bytes_of(weight) + n * oc * bytes_of(out) +
            oc * bytes_of(bias),
        [&] { inner_->matmul_forward(out, inp, weight, bias, N, IC, OC); });
}
void ProfilingBackend::matmul_backward(Buf<T> dinp, T* dweight, T* dbias, CBuf<T> dout, CBuf<T> inp,
                                       CBuf<T> weight, int N, int IC, int OC, GradWrite write) {
  const double n = N, ic = IC, oc = OC, products = dinp ? 2 : 1;
  const double grad_passes = write == GradWrite::Add ? 2 : 1;  // read and written, or written
  timed(
      OpPhase::Backward, "matmul_backward", products * 2 * n * ic * oc,
      n * oc * bytes_of(dout) + n * ic * bytes_of(inp) +
          (dinp ? oc * ic * bytes_of(weight) + n * ic * bytes_of(dinp) : 0) +
          grad_passes * kT * (oc * ic + (dbias ? oc : 0)),
      [&] { inner_->matmul_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, write); });
}

// ---- embeddings, norms, pointwise: bytes only -----------------------------------------------
void ProfilingBackend::embedding_forward(Buf<T> out, const int32_t* tokens, CBuf<T> wte,
                                         CBuf<T> wpe, int B, int Tlen, int C, int v0, int Vl) {
  const double nc = static_cast<double>(B) * Tlen * C;
  timed(OpPhase::Forward, "embedding_forward", 0,
        nc * (bytes_of(out) + bytes_of(wte) + bytes_of(wpe)),
        [&] { inner_->embedding_forward(out, tokens, wte, wpe, B, Tlen, C, v0, Vl); });
}
void ProfilingBackend::embedding_backward(T* dwte, T* dwpe, CBuf<T> dout, const int32_t* tokens,
                                          int B, int Tlen, int C, int v0, int Vl) {
  const double nc = static_cast<double>(B) * Tlen * C;
  timed(OpPhase::Backward, "embedding_backward", 0,
        nc * (bytes_of(dout) + 2 * kT) + (dwpe ? 2 * kT * Tlen * C : 0),
        [&] { inner_->embedding_backward(dwte, dwpe, dout, tokens, B, Tlen, C, v0, Vl); });
}
void ProfilingBackend::layernorm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, CBuf<T> w,
                                         CBuf<T> b, int N, int C, T eps) {
  const double nc = static_cast<double>(N) * C;
  timed(OpPhase::Forward, "layernorm_forward", 0,
        nc * (bytes_of(inp) + bytes_of(out)) + 2 * kT * N + C * (bytes_of(w) + bytes_of(b)),
        [&] { inner_->layernorm_forward(out, mean, rstd, inp, w, b, N, C, eps); });
}
void ProfilingBackend::layernorm_backward(Buf<T> dinp, T* dw, T* db, CBuf<T> dout, CBuf<T> inp,
                                          CBuf<T> w, const T* mean, const T* rstd, int N, int C) {
  const double nc = static_cast<double>(N) * C;
  timed(OpPhase::Backward, "layernorm_backward", 0,
        nc * (bytes_of(dout) + bytes_of(inp) + 2 * bytes_of(dinp)) + 2 * kT * N + 4 * kT * C,
        [&] { inner_->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C); });
}
void ProfilingBackend::rmsnorm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> w, int N, int C,
                                       T eps) {
  const double nc = static_cast<double>(N) * C;
  timed(OpPhase::Forward, "rmsnorm_forward", 0,
        nc * (bytes_of(inp) + bytes_of(out)) + kT * N + C * bytes_of(w),
        [&] { inner_->rmsnorm_forward(out, rstd, inp, w, N, C, eps); });
}
void ProfilingBackend::rmsnorm_backward(Buf<T> dinp, T* dw, CBuf<T> dout, CBuf<T> inp, CBuf<T> w,
                                        const T* rstd, int N, int C) {
  const double nc = static_cast<double>(N) * C;
  timed(OpPhase::Backward, "rmsnorm_backward", 0,
        nc * (bytes_of(dout) + bytes_of(inp) + 2 * bytes_of(dinp)) + kT * N + 2 * kT * C,
        [&] { inner_->rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C); });
}
void ProfilingBackend::add(Buf<T> out, CBuf<T> a, CBuf<T> b, size_t n) {
  timed(OpPhase::Forward, "add", 0, n * (bytes_of(out) + bytes_of(a) + bytes_of(b)),
        [&] { inner_->add(out, a, b, n); });
}
void ProfilingBackend::gelu_forward(Buf<T> out, CBuf<T> inp, size_t n) {
  timed(OpPhase::Forward, "gelu_forward", 0, n * (bytes_of(out) + bytes_of(inp)),
        [&] { inner_->gelu_forward(out, inp, n); });
}
void ProfilingBackend::gelu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, size_t n) {
  timed(OpPhase::Backward, "gelu_backward", 0,
        n * (bytes_of(dinp) + bytes_of(inp) + bytes_of(dout)),
        [&] { inner_->gelu_backward(dinp, inp, dout, n); });
}
void ProfilingBackend::swiglu_forward(Buf<T> out, CBuf<T> inp, int N, int F) {
  const double nf = static_cast<double>(N) * F;
  timed(OpPhase::Forward, "swiglu_forward", 0, nf * (bytes_of(out) + 2 * bytes_of(inp)),
        [&] { inner_->swiglu_forward(out, inp, N, F); });
}
void ProfilingBackend::swiglu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, int N, int F) {
  const double nf = static_cast<double>(N) * F;
  timed(OpPhase::Backward, "swiglu_backward", 0,
        nf * (2 * bytes_of(dinp) + 2 * bytes_of(inp) + bytes_of(dout)),
        [&] { inner_->swiglu_backward(dinp, inp, dout, N, F); });
}
void ProfilingBackend::rope_forward(Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
                                    const RopeFreqs& rope) {
  const double rotated = static_cast<double>(B) * Tlen * (NH + NKV) * hs;
  timed(OpPhase::Forward, "rope_forward", 0, 2 * rotated * bytes_of(qkv),
        [&] { inner_->rope_forward(qkv, B, Tlen, NH, NKV, hs, rope); });
}
void ProfilingBackend::rope_backward(Buf<T> dqkv, int B, int Tlen, int NH, int NKV, int hs,
                                     const RopeFreqs& rope) {
  const double rotated = static_cast<double>(B) * Tlen * (NH + NKV) * hs;
  timed(OpPhase::Backward, "rope_backward", 0, 2 * rotated * bytes_of(dqkv),
        [&] { inner_->rope_backward(dqkv, B, Tlen, NH, NKV, hs, rope); });
}
// ---- q/k norm: the q and k heads read and written (v copied forward), dqkv in place ----------
void ProfilingBackend::qk_norm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk,
                                       int N, int NH, int NKV, int hs, T eps) {
  const double row = static_cast<double>(N) * (NH + 2 * NKV) * hs;
  timed(OpPhase::Forward, "qk_norm_forward", 0, row * (bytes_of(inp) + bytes_of(out)),
        [&] { inner_->qk_norm_forward(out, rstd, inp, wq, wk, N, NH, NKV, hs, eps); });
}
void ProfilingBackend::qk_norm_backward(Buf<T> dqkv, T* dwq, T* dwk, CBuf<T> inp, CBuf<T> wq,
                                        CBuf<T> wk, const T* rstd, int N, int NH, int NKV,
                                        int hs) {
  const double normed = static_cast<double>(N) * (NH + NKV) * hs;
  timed(OpPhase::Backward, "qk_norm_backward", 0, normed * (3 * bytes_of(dqkv) + 2 * bytes_of(inp)),
        [&] { inner_->qk_norm_backward(dqkv, dwq, dwk, inp, wq, wk, rstd, N, NH, NKV, hs); });
}

namespace {
// The (query, key) pairs of B sequences that attention_sees: each query row sees the keys from
// the first its window and document let it see to its own position (positions in host memory;
// null: 0, 1, ...).
double seen_pairs(const int* qpos, int B, int Tq, const int* kpos, int Tk,
                  const AttentionMask& mask) {
  std::vector<int> keys(Tk);
  for (int j = 0; j < Tk; ++j) keys[j] = kpos ? kpos[j] : j;
  std::sort(keys.begin(), keys.end());
  const auto at_or_before = [&](int p) {
    return static_cast<double>(std::upper_bound(keys.begin(), keys.end(), p) - keys.begin());
  };
  double n = 0;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < Tq; ++i) {
      const int q = qpos ? qpos[i] : i;
      const int first = first_seen(q, mask.window, mask.doc_start(b, Tq, i));
      n += std::max(0.0, at_or_before(q) - at_or_before(first - 1));
    }
  return n;
}
}  // namespace

// ---- attention: flops of the unmasked (query, key) pairs only (flash attention skips the rest);
// per pair and head 2 products of hs forward, 5 backward (the scores recomputed); the bytes are
// the operands read and written once (the probabilities never leave the cache) and lse, D -------
void ProfilingBackend::attention_forward(Buf<T> out, T* probs, CBuf<T> qkv, int B, int Tlen, int NH,
                                         int NKV, int hs, T scale, const AttentionMask& mask) {
  const double bt = static_cast<double>(B) * Tlen;
  const double seen = NH * seen_pairs(nullptr, B, Tlen, nullptr, Tlen, mask);
  timed(OpPhase::Forward, "attention_forward", 4 * seen * hs,
        bt * hs * ((NH + 2 * NKV) * bytes_of(qkv) + NH * bytes_of(out)) + kT * bt * NH,
        [&] { inner_->attention_forward(out, probs, qkv, B, Tlen, NH, NKV, hs, scale, mask); });
}
void ProfilingBackend::attention_backward(Buf<T> dqkv, T* scratch, CBuf<T> dout, CBuf<T> qkv,
                                          CBuf<T> out, const T* probs, int B, int Tlen, int NH,
                                          int NKV, int hs, T scale, const AttentionMask& mask) {
  const double bt = static_cast<double>(B) * Tlen;
  const double seen = NH * seen_pairs(nullptr, B, Tlen, nullptr, Tlen, mask);
  timed(OpPhase::Backward, "attention_backward", 10 * seen * hs,
        bt * hs *
                ((NH + 2 * NKV) * (bytes_of(qkv) + bytes_of(dqkv)) +
                 NH * (bytes_of(dout) + bytes_of(out))) +
            2 * kT * bt * NH,
        [&] {
          inner_->attention_backward(dqkv, scratch, dout, qkv, out, probs, B, Tlen, NH, NKV, hs,
                                     scale, mask);
        });
}

void ProfilingBackend::attention_block_forward(T* out, T* lse, CBuf<T> qkv, CBuf<T> kv, int kv_ld,
                                               const int* qpos, const int* kpos, int B, int Tq,
                                               int Tk, int NH, int NKV, int hs, T scale,
                                               const AttentionMask& mask, bool merge) {
  const double seen = NH * seen_pairs(qpos, B, Tq, kpos, Tk, mask);
  const double q_rows = static_cast<double>(B) * Tq, k_rows = static_cast<double>(B) * Tk;
  const double passes = merge ? 2 : 1;  // out and lse written, and read too when merged
  timed(OpPhase::Forward, "attention_block_forward", 4 * seen * hs,
        q_rows * NH * (hs * (bytes_of(qkv) + passes * kT) + passes * kT) +
            k_rows * 2 * NKV * hs * bytes_of(kv),
        [&] {
          inner_->attention_block_forward(out, lse, qkv, kv, kv_ld, qpos, kpos, B, Tq, Tk, NH, NKV,
                                          hs, scale, mask, merge);
        });
}
void ProfilingBackend::attention_row_dot(T* D, CBuf<T> dout, CBuf<T> out, int B, int Tq, int NH,
                                         int hs) {
  const double n = static_cast<double>(B) * Tq * NH * hs;
  timed(OpPhase::Backward, "attention_row_dot", 2 * n,
        n * (bytes_of(dout) + bytes_of(out)) + kT * B * Tq * NH,
        [&] { inner_->attention_row_dot(D, dout, out, B, Tq, NH, hs); });
}
void ProfilingBackend::attention_block_backward(T* dq, T* dkv, CBuf<T> dout, CBuf<T> qkv,
                                                CBuf<T> kv, int kv_ld, const T* lse, const T* D,
                                                const int* qpos, const int* kpos, int B, int Tq,
                                                int Tk, int NH, int NKV, int hs, T scale,
                                                const AttentionMask& mask) {
  const double seen = NH * seen_pairs(qpos, B, Tq, kpos, Tk, mask);
  const double q_rows = static_cast<double>(B) * Tq, k_rows = static_cast<double>(B) * Tk;
  timed(OpPhase::Backward, "attention_block_backward", 10 * seen * hs,
        q_rows * NH * (hs * (bytes_of(qkv) + bytes_of(dout) + 2 * kT) + 2 * kT) +
            k_rows * 2 * NKV * hs * (bytes_of(kv) + 2 * kT),
        [&] {
          inner_->attention_block_backward(dq, dkv, dout, qkv, kv, kv_ld, lse, D, qpos, kpos, B, Tq,
                                           Tk, NH, NKV, hs, scale, mask);
        });
}

// ---- cross-entropy: the logits read (and, with a gradient, written) ------------------------
void ProfilingBackend::ce_row_max(CBuf<T> logits, T* row_max, int N, int Vl, int v0, int V) {
  timed(OpPhase::Loss, "ce_row_max", 0, static_cast<double>(N) * Vl * bytes_of(logits),
        [&] { inner_->ce_row_max(logits, row_max, N, Vl, v0, V); });
}
void ProfilingBackend::ce_stats(CBuf<T> logits, const T* row_max, const int32_t* targets, T* stats,
                                int N, int Vl, int v0, int V) {
  timed(OpPhase::Loss, "ce_stats", 0, static_cast<double>(N) * Vl * bytes_of(logits),
        [&] { inner_->ce_stats(logits, row_max, targets, stats, N, Vl, v0, V); });
}
double ProfilingBackend::ce_loss(Buf<T> logits, const T* row_max, const T* stats,
                                 const int32_t* targets, T* losses, int N, int Vl, int v0, int V,
                                 T dloss) {
  return timed(OpPhase::Loss, "ce_loss", 0,
               static_cast<double>(N) * Vl * bytes_of(logits) * (dloss != 0 ? 2 : 1), [&] {
                 return inner_->ce_loss(logits, row_max, stats, targets, losses, N, Vl, v0, V,
                                        dloss);
               });
}

// ---- optimizer: each buffer read, the updated ones written; one call a step -------------------
double ProfilingBackend::sum_squares(const T* x, Segments segments) {
  return timed(OpPhase::Optimizer, "sum_squares", 0, kT * elements(segments),
               [&] { return inner_->sum_squares(x, segments); });
}
void ProfilingBackend::scale(T* x, T s, size_t n) {
  timed(OpPhase::Optimizer, "scale", 0, 2 * kT * n, [&] { inner_->scale(x, s, n); });
}
void ProfilingBackend::adamw(T* param, const T* grad, T* m, T* v, Segments segments, float lr,
                             float beta1, float beta2, float eps, float weight_decay, int t,
                             float grad_scale, Buf<T> rounded) {
  const size_t n = elements(segments);
  timed(OpPhase::Optimizer, "adamw", 0, (7 * kT + bytes_of(rounded)) * n, [&] {
    inner_->adamw(param, grad, m, v, segments, lr, beta1, beta2, eps, weight_decay, t, grad_scale,
                  rounded);
  });
}
void ProfilingBackend::sgd_momentum(T* param, const T* grad, T* buf, Segments segments, float lr,
                                    float momentum, float weight_decay, float grad_scale,
                                    Buf<T> rounded) {
  const size_t n = elements(segments);
  timed(OpPhase::Optimizer, "sgd_momentum", 0, (5 * kT + bytes_of(rounded)) * n, [&] {
    inner_->sgd_momentum(param, grad, buf, segments, lr, momentum, weight_decay, grad_scale,
                         rounded);
  });
}
void ProfilingBackend::lamb_moments(T* param, const T* grad, T* m, T* v, Segments segments,
                                    float lr, float beta1, float beta2, float eps,
                                    float weight_decay, int t, float grad_scale, double* sums) {
  timed(OpPhase::Optimizer, "lamb_moments", 0, 6 * kT * elements(segments), [&] {
    inner_->lamb_moments(param, grad, m, v, segments, lr, beta1, beta2, eps, weight_decay, t,
                         grad_scale, sums);
  });
}
void ProfilingBackend::lamb_update(T* param, const T* m, const T* v, Segments segments,
                                   const float* lr, float beta1, float beta2, float eps,
                                   float weight_decay, int t) {
  timed(OpPhase::Optimizer, "lamb_update", 0, 4 * kT * elements(segments), [&] {
    inner_->lamb_update(param, m, v, segments, lr, beta1, beta2, eps, weight_decay, t);
  });
}

}  // namespace mpitrain
