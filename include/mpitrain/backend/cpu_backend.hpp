// The CPU backend: OpenBLAS gemms for every matmul (attention included) and OpenMP + SIMD loops
// for the rest. Host memory; instantiated for float (the trainer) and double (gradient checks).
//
// Threads: the constructor sets the OpenMP and OpenBLAS thread counts of the calling thread.
// Loops only go parallel above a work threshold, so tiny shapes do not pay for a thread team.
// Reductions over rows (bias/weight-norm gradients, embedding gradients) are parallelised over
// columns and the scalar sums over fixed chunks, so every result is bitwise deterministic and
// independent of the thread count (the gemms inside OpenBLAS and oneDNN are the only exception).
//
// bf16 GEMMs (CpuBackend<float> constructed with Precision::Bf16): matmul_forward/backward run
// oneDNN bf16 matmuls with fp32 accumulation into fp32 results. Their operands must already hold
// bf16 values in float containers (the model rounds them), so the float -> bf16 conversion into
// the backend's scratch buffers is exact and the results equal the sgemm path's up to summation
// order. One oneDNN primitive per shape, created on first use and cached; the scratch buffers
// (both operands, oneDNN's scratchpad) only grow when a larger shape is first seen, so steady-state
// steps allocate nothing of their own. A CPU without bf16 instructions (or a shape oneDNN has
// only reference code for) runs sgemm instead, said once on stderr. Fp32 and Fp16: sgemm.
#pragma once

#include <memory>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain {

namespace cpu {
class Bf16Matmul;  // src/backend/cpu_matmul_bf16.hpp
struct Bf16MatmulDelete {
  void operator()(Bf16Matmul* p) const;
};
}  // namespace cpu

template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  explicit CpuBackend(int threads);  // threads <= 0: keep the current OpenMP default
  // matmul_precision Bf16: the bf16 GEMMs above (float only: Error for double).
  CpuBackend(int threads, Precision matmul_precision);
  int threads() const { return threads_; }
  bool bf16_gemms() const;  // constructed for bf16 on a CPU with bf16 instructions

  T* alloc(size_t n) override;
  void free(T* p) override;
  void zero(T* x, size_t n) override;
  void copy(T* dst, const T* src, size_t n) override;
  void round_to(T* x, size_t n, Precision p) override;
  void set_alloc_kind(AllocKind) override {}  // one pool: host memory
  bool host_memory() const override { return true; }
  void upload(T* dst, const T* host_src, size_t n) override { copy(dst, host_src, n); }
  void download(T* host_dst, const T* src, size_t n) override { copy(host_dst, src, n); }
  int32_t* alloc_ids(size_t n) override;
  void free_ids(int32_t* p) override;
  void upload_ids(int32_t* dst, const int32_t* host_src, size_t n) override;

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

  size_t attention_state_size(int B, int Tlen, int NH) const override {  // the probabilities
    return static_cast<size_t>(B) * NH * Tlen * Tlen;
  }
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
  void sgd_momentum(T* param, const T* grad, T* buf, size_t n, float lr, float momentum,
                    float weight_decay, float grad_scale) override;
  void lamb_moments(const T* param, const T* grad, T* m, T* v, size_t n, float beta1, float beta2,
                    float eps, float weight_decay, int t, float grad_scale,
                    double sums[2]) override;
  void lamb_update(T* param, const T* m, const T* v, size_t n, float lr, float beta1, float beta2,
                   float eps, float weight_decay, int t) override;

 private:
  // C(M,N) = op(A)(M,K) @ op(B)(K,N) (+ C when accumulate), row-major, contiguous: A is stored
  // (K,M) when ta, B (N,K) when tb. bf16 kernels where the backend has them, else the gemm.
  // a_unchanged: A is unchanged since the previous product (its bf16 copy may be reused).
  void product(bool ta, bool tb, int M, int N, int K, const T* A, const T* B, bool accumulate,
               T* C, bool a_unchanged);

  int threads_;
  std::unique_ptr<cpu::Bf16Matmul, cpu::Bf16MatmulDelete> bf16_;  // null unless built for bf16
};

}  // namespace mpitrain
