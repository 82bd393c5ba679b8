// The CPU backend: OpenBLAS gemms for every matmul (attention included) and OpenMP + SIMD loops
// for the rest. Host memory; instantiated for float (the trainer) and double (gradient checks).
//
// Threads: the constructor sets the OpenMP and OpenBLAS thread counts of the calling thread.
// Loops only go parallel above a work threshold, so tiny shapes do not pay for a thread team.
// Reductions over rows (bias/weight-norm gradients, embedding gradients) are parallelised over
// columns and the scalar sums over fixed chunks, so every result is bitwise deterministic and
// independent of the thread count (the gemms inside OpenBLAS are the only exception).
#pragma once

#include "mpitrain/backend/backend.hpp"

namespace mpitrain {

template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  explicit CpuBackend(int threads);  // threads <= 0: keep the current OpenMP default
  int threads() const { return threads_; }

  T* alloc(size_t n) override;
  void free(T* p) override;
  void zero(T* x, size_t n) override;
  void copy(T* dst, const T* src, size_t n) override;
  void round_to(T* x, size_t n, Precision p) override;

  void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int IC,
                      int OC) override;
  void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                       const T* weight, int N, int IC, int OC) override;

  void embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe, int B, int Tlen,
                         int C, int v0, int Vl) override;
  void embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens, int B, int Tlen,
                          int C, int v0, int Vl) override;

  void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                         int C, T eps) override;
  void layernorm_backward(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                          const T* mean, const T* rstd, int N, int C) override;
  void rmsnorm_forward(T* out, T* rstd, const T* inp, const T* w, int N, int C, T eps) override;
  void rmsnorm_backward(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd,
                        int N, int C) override;

  void add(T* out, const T* a, const T* b, size_t n) override;
  void gelu_forward(T* out, const T* inp, size_t n) override;
  void gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) override;
  void swiglu_forward(T* out, const T* inp, int N, int F) override;
  void swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F) override;

  void rope_forward(T* qkv, int B, int Tlen, int NH, int NKV, int hs, T theta) override;
  void rope_backward(T* dqkv, int B, int Tlen, int NH, int NKV, int hs, T theta) override;

  void attention_forward(T* out, T* probs, const T* qkv, int B, int Tlen, int NH, int NKV,
                         int hs) override;
  void attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* probs, int B,
                          int Tlen, int NH, int NKV, int hs) override;

  void ce_row_max(const T* logits, T* row_max, int N, int Vl, int v0, int V) override;
  void ce_stats(const T* logits, const T* row_max, const int32_t* targets, T* stats, int N, int Vl,
                int v0, int V) override;
  double ce_loss(T* logits, const T* row_max, const T* stats, const int32_t* targets, T* losses,
                 int N, int Vl, int v0, int V, T dloss) override;

  double sum_squares(const T* x, size_t n) override;
  void scale(T* x, T s, size_t n) override;
  void adamw(T* param, const T* grad, T* m, T* v, size_t n, float lr, float beta1, float beta2,
             float eps, float weight_decay, int t, float grad_scale) override;

 private:
  int threads_;
};

}  // namespace mpitrain
