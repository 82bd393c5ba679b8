// The CPU backend's attention before flash attention (issue 35), word for word, kept as the
// reference of the flash attention's tests and bench/attention_bench.cpp: per (batch, head) the
// whole T x T score matrix, softmax over its causal half, the probabilities (B, NH, T, T) kept for
// backward (scratch as large). Private backend header: cpu::gemm and exp_fast as the backend has.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "../../src/backend/cpu_kernels.hpp"

namespace mpitrain::testing {

using cpu::gemm;

// the calling thread (the sgemm threads each product): decided on the whole call's shape, and kept
// for the blocks of a staged call, so both run every gemm alike and give the same bits.
inline bool heads_in_parallel(int B, int Tlen, int NH, int hs, int loop) {
  return static_cast<size_t>(B) * NH * Tlen * Tlen * hs > cpu::kParallelWork && loop > 1;
}

// per (b,h), g = h / (NH/NKV):  S = scale q k_g^T  (T,T);  P = causal softmax(S) (rows in
// place; P[t, j>t] = 0);  y = P v_g  (T,hs) into out[b, :, h*hs : (h+1)*hs]
template <typename T>
void dense_attention_forward(T* out, T* probs, const T* qkv, int B, int Tlen, int NH, int NKV,
                              int hs, T scale, bool parallel) {
  const int QKV = (NH + 2 * NKV) * hs, A = NH * hs, group = NH / NKV;
#pragma omp parallel for schedule(static) if (parallel)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH, g = h / group;
    const T* q = qkv + static_cast<size_t>(b) * Tlen * QKV + h * hs;
    const T* k = qkv + static_cast<size_t>(b) * Tlen * QKV + (NH + g) * hs;
    const T* v = qkv + static_cast<size_t>(b) * Tlen * QKV + (NH + NKV + g) * hs;
    T* P = probs + static_cast<size_t>(bh) * Tlen * Tlen;
    gemm(CblasNoTrans, CblasTrans, Tlen, Tlen, hs, scale, q, QKV, k, QKV, T(0), P, Tlen);
    for (int t = 0; t < Tlen; ++t) {
      T* row = P + static_cast<size_t>(t) * Tlen;
      T mx = row[0];
#pragma omp simd reduction(max : mx)
      for (int j = 0; j <= t; ++j) mx = std::max(mx, row[j]);
      T sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int j = 0; j <= t; ++j) {
        row[j] = cpu::exp_fast(row[j] - mx);
        sum += row[j];
      }
      const T inv = T(1) / sum;
#pragma omp simd
      for (int j = 0; j <= t; ++j) row[j] *= inv;
      for (int j = t + 1; j < Tlen; ++j) row[j] = T(0);
    }
    gemm(CblasNoTrans, CblasNoTrans, Tlen, hs, Tlen, T(1), P, Tlen, v, QKV, T(0),
         out + static_cast<size_t>(b) * Tlen * A + h * hs, A);
  }
}

// per (b, kv head g), over its query heads h (so dk_g, dv_g have one writer):
//   dP = dy v_g^T;  dv_g += P^T dy;  dS = P (dP - rowsum(dP P)) scale
//   dq_h = dS k_g;  dk_g += dS^T q_h          (the first head of the group overwrites: beta = 0)
// dS lives in scratch (B,NH,T,T).
template <typename T>
void dense_attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv, const T* probs,
                               int B, int Tlen, int NH, int NKV, int hs, T scale, bool parallel) {
  const int QKV = (NH + 2 * NKV) * hs, A = NH * hs, group = NH / NKV;
#pragma omp parallel for schedule(static) if (parallel)
  for (int bg = 0; bg < B * NKV; ++bg) {
    const int b = bg / NKV, g = bg % NKV;
    const size_t base = static_cast<size_t>(b) * Tlen * QKV;
    const T* k = qkv + base + (NH + g) * hs;
    const T* v = qkv + base + (NH + NKV + g) * hs;
    T* dk = dqkv + base + (NH + g) * hs;
    T* dv = dqkv + base + (NH + NKV + g) * hs;
    for (int j = 0; j < group; ++j) {
      const int h = g * group + j;
      const T beta = j == 0 ? T(0) : T(1);
      const T* q = qkv + base + h * hs;
      T* dq = dqkv + base + h * hs;
      const T* dy = dout + static_cast<size_t>(b) * Tlen * A + h * hs;
      const T* P = probs + (static_cast<size_t>(b) * NH + h) * Tlen * Tlen;
      T* dS = scratch + (static_cast<size_t>(b) * NH + h) * Tlen * Tlen;
      gemm(CblasNoTrans, CblasTrans, Tlen, Tlen, hs, T(1), dy, A, v, QKV, T(0), dS, Tlen);
      gemm(CblasTrans, CblasNoTrans, Tlen, hs, Tlen, T(1), P, Tlen, dy, A, beta, dv, QKV);
      for (int t = 0; t < Tlen; ++t) {
        const T* p = P + static_cast<size_t>(t) * Tlen;
        T* d = dS + static_cast<size_t>(t) * Tlen;
        T s = 0;
#pragma omp simd reduction(+ : s)
        for (int i = 0; i <= t; ++i) s += p[i] * d[i];
#pragma omp simd
        for (int i = 0; i <= t; ++i) d[i] = p[i] * (d[i] - s) * scale;
        for (int i = t + 1; i < Tlen; ++i) d[i] = T(0);
      }
      gemm(CblasNoTrans, CblasNoTrans, Tlen, hs, Tlen, T(1), dS, Tlen, k, QKV, T(0), dq, QKV);
      gemm(CblasTrans, CblasNoTrans, Tlen, hs, Tlen, T(1), dS, Tlen, q, QKV, beta, dk, QKV);
    }
  }
}

}  // namespace mpitrain::testing
