// Private helpers of the CPU backend (src/backend/cpu_*.cpp): the gemm overloads, a vectorisable
// float exp, and the two loop shapes every reduction uses.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace mpitrain::cpu {

// Below this much work (elements touched) a loop runs on the calling thread only.
inline constexpr size_t kParallelWork = size_t{1} << 15;

// One row's RMSNorm: o = x / sqrt(mean(x^2) + eps) * w over C elements; returns 1/rms (the
// backward's rstd). The rows of rmsnorm_forward and the q/k heads of qk_norm_forward.
template <typename T>
inline T rmsnorm_row(T* o, const T* x, const T* w, int C, T eps) {
  T ss = 0;
#pragma omp simd reduction(+ : ss)
  for (int c = 0; c < C; ++c) ss += x[c] * x[c];
  const T r = T(1) / std::sqrt(ss / C + eps);
#pragma omp simd
  for (int c = 0; c < C; ++c) o[c] = x[c] * r * w[c];
  return r;
}

// ---- gemm: C(M,N) = alpha op(A)(M,K) op(B)(K,N) + beta C, row-major ------------------------
// float (cpu_gemm.cpp): oneDNN's sgemm where oneDNN has AVX-512 kernels for the CPU and is 3.11.2
// or later (earlier ones corrupt the heap when a signal lands in that kernel), else OpenBLAS's.
// oneDNN picks its kernels by the instructions the CPU has; OpenBLAS 0.3.21 picks them by CPU
// model and falls back on CPUs it does not know, which blas_kernel.hpp mends by starting the
// program again on the kernels the CPU's flags call for (unless OPENBLAS_CORETYPE is set). With AVX2 only, the two were measured alike (oneDNN 1.0-1.1x) and oneDNN's per-call
// packing buffers raise the peak memory, so OpenBLAS stays. bench/cpu_gemm compares them on the
// model's shapes. Arguments either library refuses throw Error with the library's name, the
// shape and why (OpenBLAS's own check only prints to stderr and leaves C as it was).
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
          int lda, const float* B, int ldb, float beta, float* C, int ldc);
// double (the gradient-check tests): OpenBLAS, oneDNN has no dgemm.
inline void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, double alpha,
                 const double* A, int lda, const double* B, int ldb, double beta, double* C,
                 int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// ---- exp ----------------------------------------------------------------------------------
// float: Cephes expf, written so that the compiler vectorises it (no libm call, no branch; the
// clamp is if-converted for AVX2 only under -fno-trapping-math, which the backend's files get).
// x = n ln2 + r with |r| <= ln2/2 (Cody-Waite split of ln2), e^r by a degree-7 polynomial, 2^n
// put into the exponent bits. Max relative error ~2 ulp on [-87, 88]; inputs are clamped to that
// range (e^-87 ~ 1.6e-38 stands in for 0, e^88 ~ 1.7e38 for overflow); NaN propagates.
inline float exp_fast(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  // round to nearest by the 1.5 * 2^23 trick (std::floor does not vectorise without
  // -fno-trapping-math); |x log2 e| < 128 is far inside its range.
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r) + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  return p * std::bit_cast<float>(bits);
}
inline double exp_fast(double x) { return std::exp(x); }  // double is for tests: exact libm

// max(x[0, n)), -inf for n 0. Not std::max(m, x[j]): GCC leaves that form scalar. A NaN may be
// dropped here; the callers' e^(x - max) still turns it into NaN.
template <typename T>
inline T max_of(const T* x, int n) {
  T m = -std::numeric_limits<T>::infinity();
#pragma omp simd reduction(max : m)
  for (int j = 0; j < n; ++j) m = m > x[j] ? m : x[j];
  return m;
}

// ---- loop shapes --------------------------------------------------------------------------
// The fixed chunks of [0, n) a deterministic sum adds: count chunks of per elements from 0 (the
// last ones shorter or empty), at most kMaxChunks, each at least min_chunk where n allows.
struct Chunking {
  static constexpr size_t kMaxChunks = 64;
  size_t count, per;
};
inline Chunking chunking(size_t n, size_t min_chunk) {
  const size_t chunks =
      std::clamp<size_t>((n + min_chunk - 1) / min_chunk, 1, Chunking::kMaxChunks);
  return {chunks, (n + chunks - 1) / chunks};
}

// Sum of f(begin, end) (a double) over the fixed chunks of [0, n). The chunking depends only on n
// and min_chunk, so the result is the same for any thread count.
template <class F>
double chunked_sum(size_t n, size_t min_chunk, F&& f) {
  const auto [chunks, per] = chunking(n, min_chunk);
  double partial[Chunking::kMaxChunks];
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t b = std::min(n, c * per), e = std::min(n, b + per);
    partial[c] = b < e ? f(b, e) : 0.0;
  }
  double s = 0.0;
  for (size_t c = 0; c < chunks; ++c) s += partial[c];
  return s;
}

// f(n) over the rows n of N x C, in parallel when N C passes `parallel_above` (the row ops: a
// costlier row, SwiGLU's exp, pays threads sooner).
template <class F>
void for_rows(int N, int C, F&& f, size_t parallel_above = kParallelWork) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > parallel_above)
  for (int n = 0; n < N; ++n) f(static_cast<size_t>(n));
}

// f(c0, c1) over blocks of the columns [0, C), in parallel when rows*C is large: the shape of
// every "sum over rows" (bias, norm-weight, embedding gradients) with no races and no scratch.
inline constexpr int kColumnBlock = 64;
template <class F>
void for_column_blocks(int C, size_t rows, F&& f) {
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (rows * C > kParallelWork && blocks > 1)
  for (int blk = 0; blk < blocks; ++blk)
    f(blk * kColumnBlock, std::min(C, (blk + 1) * kColumnBlock));
}

}  // namespace mpitrain::cpu
