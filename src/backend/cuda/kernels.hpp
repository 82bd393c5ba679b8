// The CUDA kernels of the backend, as launch functions (defined in the *.cu files beside this,
// called from the C++ side), every launch on the given stream and checked with CUDA_CHECK_LAUNCH.
// Compute tensors are In / Out views (tensor_view.hpp: fp32, bf16 or fp16 storage, read as
// float, written rounded to their type); statistics, parameter gradients and optimizer state are
// float. Shapes and conventions as in backend.hpp; only what differs is said here.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "mpitrain/backend/precision.hpp"
#include "mpitrain/backend/rope_freqs.hpp"
#include "tensor_view.hpp"

namespace mpitrain::cuda {

// ---- pointwise (pointwise.cu) ---------------------------------------------------------------
void launch_add(Out out, In a, In b, size_t n, cudaStream_t s);
void launch_accumulate(Out y, In x, size_t n, cudaStream_t s);  // y += x
void launch_scale(float* x, float a, size_t n, cudaStream_t s);
void launch_gelu_forward(Out out, In inp, size_t n, cudaStream_t s);
void launch_gelu_backward(Out dinp, In inp, In dout, size_t n, cudaStream_t s);
void launch_swiglu_forward(Out out, In inp, int N, int F, cudaStream_t s);
void launch_swiglu_backward(Out dinp, In inp, In dout, int N, int F, cudaStream_t s);
void launch_round(float* x, size_t n, Precision p, cudaStream_t s);
// dst = src in dst's type (rounded to nearest even where it narrows); rows x cols taken from src
// with leading dimension ld (elements), written densely.
void launch_convert(Out dst, In src, size_t rows, size_t cols, size_t ld, cudaStream_t s);

// ---- column sums (reduce.cu): out[c] += sum over rows of x[r*cols + c], in a fixed order -----
// scratch: colsum_scratch(rows, cols) floats.
size_t colsum_scratch(int rows, int cols);
void launch_colsum_accumulate(float* out, In x, int rows, int cols, float* scratch, cudaStream_t s);
// Sum of n doubles in a fixed order, written to *out (device).
void launch_sum_doubles(double* out, const double* x, size_t n, cudaStream_t s);

// ---- embeddings (embedding.cu) ----------------------------------------------------------------
void launch_embedding_forward(Out out, const int32_t* tokens, In wte, In wpe, int B, int T, int C,
                              int v0, int Vl, cudaStream_t s);
// dwte rows of held tokens += dout rows (atomic adds); dwpe via launch_colsum_accumulate.
void launch_embedding_backward_wte(float* dwte, In dout, const int32_t* tokens, int N, int C,
                                   int v0, int Vl, cudaStream_t s);

// ---- norms (norms.cu) -------------------------------------------------------------------------
void launch_layernorm_forward(Out out, float* mean, float* rstd, In inp, In w, In b, int N, int C,
                              float eps, cudaStream_t s);
void launch_rmsnorm_forward(Out out, float* rstd, In inp, In w, int N, int C, float eps,
                            cudaStream_t s);
// dinp += input gradient; dw (and db unless null) += parameter gradients. mean null = RMSNorm.
// scratch: norm_backward_scratch(N, C) floats.
size_t norm_backward_scratch(int N, int C);
void launch_norm_backward(Out dinp, float* dw, float* db, In dout, In inp, In w, const float* mean,
                          const float* rstd, int N, int C, float* scratch, cudaStream_t s);

// ---- RoPE (rope.cu): sign +1 forward, -1 the inverse rotation (backward) ----------------------
void launch_rope(Out qkv, int B, int T, int NH, int NKV, int hs, const RopeFreqs& rope, int sign,
                 cudaStream_t s);

// ---- per-head q/k RMSNorm (qk_norm.cu): the CPU backend's maths (cpu_qk_norm.cpp) -------------
void launch_qk_norm_forward(Out out, float* rstd, In inp, In wq, In wk, int N, int NH, int NKV,
                            int hs, float eps, cudaStream_t s);
// In place on dqkv's q and k heads; dwq, dwk += (column sums: qk_norm_backward_scratch(N, hs)).
size_t qk_norm_backward_scratch(int N, int hs);
void launch_qk_norm_backward(Out dqkv, float* dwq, float* dwk, In inp, In wq, In wk,
                             const float* rstd, int N, int NH, int NKV, int hs, float* scratch,
                             cudaStream_t s);

// ---- attention (attention.cu), flash-style in fp32 ---------------------------------------------
// hs <= 256. out(B,T,NH*hs) and lse(B,NH,T) = ln sum_j e^(scale q.k_j), causal (window > 0:
// each query's `window` latest keys; docs (B, T) in device memory, or null: no key before the
// query's document start; backend.hpp's attention_sees); query head h reads kv head h/(NH/NKV).
void launch_attention_forward(Out out, float* lse, In qkv, int B, int T, int NH, int NKV, int hs,
                              float scale, int window, const int* docs, cudaStream_t s);
// D(B,NH,T) = rowsum(dout * out) per head, from forward's out: backward's preprocessing.
void launch_attention_d(float* D, In dout, In out, int B, int T, int NH, int hs, cudaStream_t s);
// dqkv (overwritten; fp32: the query gradients are atomic sums) from dout, forward's lse and D.
void launch_attention_backward(float* dqkv, In dout, In qkv, const float* lse, const float* D,
                               int B, int T, int NH, int NKV, int hs, float scale, int window,
                               const int* docs, cudaStream_t s);
// Context parallelism's block pairs (the same kernels, by position): backend.hpp's
// attention_block_forward / attention_block_backward, with qpos (Tq), kpos (Tk) and the query
// rows' document starts docs (B, Tq) in device memory (null: 0, 1, ...; no documents); out, lse,
// dq, dkv fp32; kv_ld >= 2 NKV hs; hs <= 256.
// attention_row_dot is launch_attention_d with T = Tq.
void launch_attention_block_forward(float* out, float* lse, In qkv, In kv, int kv_ld,
                                    const int* qpos, const int* kpos, int B, int Tq, int Tk, int NH,
                                    int NKV, int hs, float scale, int window, const int* docs,
                                    bool merge, cudaStream_t s);
void launch_attention_block_backward(float* dq, float* dkv, In dout, In qkv, In kv, int kv_ld,
                                     const float* lse, const float* D, const int* qpos,
                                     const int* kpos, int B, int Tq, int Tk, int NH, int NKV,
                                     int hs, float scale, int window, const int* docs,
                                     cudaStream_t s);

// ---- cross-entropy (crossentropy.cu); row_loss(N) doubles for the fixed-order total ----------
void launch_ce_row_max(In logits, float* row_max, int N, int Vl, int v0, int V, cudaStream_t s);
void launch_ce_stats(In logits, const float* row_max, const int32_t* targets, float* stats, int N,
                     int Vl, int v0, int V, cudaStream_t s);
void launch_ce_loss(Out logits, const float* row_max, const float* stats, const int32_t* targets,
                    float* losses, double* row_loss, int N, int Vl, int v0, int V, float dloss,
                    cudaStream_t s);

// ---- optimizer (optimizer.cu), over a table of segments a launch --------------------------------
// Up to kMax segments of a list (backend.hpp's Segment), passed to the kernels by value (kernel
// parameters hold up to 32 KiB from sm_70): segment s is elements [at[s], at[s] + n[s]) of the
// flat buffers, worked on by the launch's blocks [first[s], first[s + 1]) (at least one each);
// lr[s]: LAMB's rate for it. Zero-initialised: first[0] = 0.
struct SegmentTable {
  static constexpr int kMax = 1024;
  int count = 0;
  unsigned first[kMax + 1];
  size_t at[kMax], n[kMax];
  float lr[kMax];
  bool decay[kMax];
  unsigned blocks() const { return first[count]; }
};
static_assert(sizeof(SegmentTable) <= 32000, "kernel parameters beyond 32 KiB");
// bc1 = 1/(1-b1^t), bc2 = 1/(1-b2^t) computed by the caller; wd on the segments marked decay;
// rounded (null for none): the updated param rounded to its type, as launch_convert writes it.
void launch_adamw(float* param, const float* grad, float* m, float* v, const SegmentTable& t,
                  float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                  float grad_scale, Out rounded, cudaStream_t s);
// g = grad_scale grad; buf = momentum buf + g; p -= lr (buf + wd p); rounded as launch_adamw's
void launch_sgd(float* param, const float* grad, float* buf, const SegmentTable& t, float lr,
                float momentum, float wd, float grad_scale, Out rounded, cudaStream_t s);
// LAMB's first pass (backend.hpp): sums (2 x t.count doubles, device) = {p^2, u^2} per segment,
// fixed order; partials: 2 x t.blocks() doubles of scratch. Then p -= lr[s] u.
void launch_lamb_moments(double* sums, double* partials, float* param, const float* grad, float* m,
                         float* v, const SegmentTable& t, float lr, float b1, float b2, float eps,
                         float wd, float bc1, float bc2, float grad_scale, cudaStream_t s);
void launch_lamb_update(float* param, const float* m, const float* v, const SegmentTable& t,
                        float eps, float wd, float bc1, float bc2, cudaStream_t s);
// sums (t.count doubles, device) = each segment's sum of x^2 in double, fixed order; partials:
// t.blocks() doubles of scratch.
void launch_sum_squares(double* sums, double* partials, const float* x, const SegmentTable& t,
                        cudaStream_t s);

// ---- GEMM (gemm_kernel.cu), our own tiled kernel
// ------------------------------------------------- C(M,N) = alpha-free: C = A(M,K) B(K,N) [+
// bias(N) per row] [+ C if accumulate], element (m,k) of A at A[m*sam + k*sak], (k,n) of B at
// B[k*sbk + n*sbn], C row-major with ldc. Operands are rounded to `operands` (fp32: as they are)
// before the products; fp32 accumulation; C written in its type.
void launch_gemm(Out C, In A, In B, In bias, int M, int N, int K, long sam, long sak, long sbk,
                 long sbn, int ldc, bool accumulate, Precision operands, cudaStream_t s);

}  // namespace mpitrain::cuda
