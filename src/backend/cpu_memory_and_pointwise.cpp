// CPU backend: construction, memory, embeddings and the pointwise ops (add, GELU, SwiGLU).
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cpu_kernels.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::exp_fast;
using cpu::kParallelWork;

template <typename T>
CpuBackend<T>::CpuBackend(int threads) : threads_(threads > 0 ? threads : omp_get_max_threads()) {
  omp_set_num_threads(threads_);
  openblas_set_num_threads(threads_);
}

// ---- memory -------------------------------------------------------------------------------

template <typename T>
T* CpuBackend<T>::alloc(size_t n) {
  const size_t bytes = std::max<size_t>(64, (n * sizeof(T) + 63) / 64 * 64);
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  std::memset(p, 0, bytes);
  return static_cast<T*>(p);
}

template <typename T>
void CpuBackend<T>::free(T* p) {
  std::free(p);
}

template <typename T>
void CpuBackend<T>::zero(T* x, size_t n) {
#pragma omp parallel for schedule(static) if (n > 16 * kParallelWork)
  for (size_t i = 0; i < n; i += kParallelWork)
    std::memset(x + i, 0, std::min(kParallelWork, n - i) * sizeof(T));
}

template <typename T>
void CpuBackend<T>::copy(T* dst, const T* src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 16 * kParallelWork)
  for (size_t i = 0; i < n; i += kParallelWork)
    std::memcpy(dst + i, src + i, std::min(kParallelWork, n - i) * sizeof(T));
}

template <typename T>
int32_t* CpuBackend<T>::alloc_ids(size_t n) {
  void* p = std::calloc(std::max<size_t>(n, 1), sizeof(int32_t));
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<int32_t*>(p);
}

template <typename T>
void CpuBackend<T>::free_ids(int32_t* p) {
  std::free(p);
}

template <typename T>
void CpuBackend<T>::upload_ids(int32_t* dst, const int32_t* host_src, size_t n) {
  std::memcpy(dst, host_src, n * sizeof(int32_t));
}

// x = round_to(x, p) elementwise (through float for T = double)
template <typename T>
void CpuBackend<T>::round_to(T* x, size_t n, Precision p) {
  if (p == Precision::Fp32) return;
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<T>(mpitrain::round_to(static_cast<float>(x[i]), p));
}

// ---- embeddings ---------------------------------------------------------------------------
// Vocabulary-parallel: this rank holds wte rows [v0, v0 + Vl); a token t is held iff
// 0 <= t - v0 < Vl (one unsigned comparison).
namespace {
inline bool holds(int32_t token, int v0, int Vl) {
  return static_cast<uint32_t>(token - v0) < static_cast<uint32_t>(Vl);
}
}  // namespace

// out(B,T,C) = (wte[tokens[b,t] - v0] if held, else 0) + (wpe[t] if wpe)
template <typename T>
void CpuBackend<T>::embedding_forward(T* out, const int32_t* tokens, const T* wte, const T* wpe,
                                      int B, int Tlen, int C, int v0, int Vl) {
  const int N = B * Tlen;
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelWork)
  for (int n = 0; n < N; ++n) {
    T* o = out + static_cast<size_t>(n) * C;
    const T* p = wpe != nullptr ? wpe + static_cast<size_t>(n % Tlen) * C : nullptr;
    if (holds(tokens[n], v0, Vl)) {
      const T* e = wte + static_cast<size_t>(tokens[n] - v0) * C;
      if (p != nullptr) {
#pragma omp simd
        for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
      } else {
        std::memcpy(o, e, C * sizeof(T));
      }
    } else if (p != nullptr) {
      std::memcpy(o, p, C * sizeof(T));
    } else {
      std::memset(o, 0, C * sizeof(T));
    }
  }
}

// dwte[tokens[n] - v0] += dout[n] for held tokens; dwpe[t] += sum_b dout[b,t] (all tokens).
// Parallel over column blocks: repeated tokens never race and the order of the additions is fixed.
template <typename T>
void CpuBackend<T>::embedding_backward(T* dwte, T* dwpe, const T* dout, const int32_t* tokens,
                                       int B, int Tlen, int C, int v0, int Vl) {
  const int N = B * Tlen;
  cpu::for_column_blocks(C, N, [&](int c0, int c1) {
    for (int n = 0; n < N; ++n) {
      const T* d = dout + static_cast<size_t>(n) * C;
      if (holds(tokens[n], v0, Vl)) {
        T* e = dwte + static_cast<size_t>(tokens[n] - v0) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) e[c] += d[c];
      }
      if (dwpe != nullptr) {
        T* p = dwpe + static_cast<size_t>(n % Tlen) * C;
#pragma omp simd
        for (int c = c0; c < c1; ++c) p[c] += d[c];
      }
    }
  });
}

// ---- pointwise ----------------------------------------------------------------------------

// out = a + b
template <typename T>
void CpuBackend<T>::add(T* out, const T* a, const T* b, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

// GELU (tanh approximation), using 0.5 (1 + tanh(u)) = sigmoid(2u) = 1 / (1 + e^-2u):
//   out = x s,  s = 1 / (1 + e^-2u),  u = k0 (x + k1 x^3)
// (accurate in relative terms for any x, unlike 1 + tanh(u) for very negative x).
namespace {
constexpr double kGeluK0 = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluK1 = 0.044715;
}  // namespace

template <typename T>
void CpuBackend<T>::gelu_forward(T* out, const T* inp, size_t n) {
  const T k0 = T(kGeluK0), k1 = T(kGeluK1);
#pragma omp parallel for simd schedule(static) if (n > kParallelWork / 4)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = k0 * (x + k1 * x * x * x);
    out[i] = x / (T(1) + exp_fast(T(-2) * u));
  }
}

// dinp = dout (s + x 2u' s (1 - s)),  u' = k0 (1 + 3 k1 x^2),  1 - s = e s with e = e^-2u
template <typename T>
void CpuBackend<T>::gelu_backward(T* dinp, const T* inp, const T* dout, size_t n) {
  const T k0 = T(kGeluK0), k1 = T(kGeluK1);
#pragma omp parallel for simd schedule(static) if (n > kParallelWork / 4)
  for (size_t i = 0; i < n; ++i) {
    const T x = inp[i];
    const T u = k0 * (x + k1 * x * x * x);
    const T du = k0 * (T(1) + T(3) * k1 * x * x);
    const T e = exp_fast(T(-2) * u);
    const T s = T(1) / (T(1) + e);
    dinp[i] = dout[i] * (s + x * T(2) * du * s * (e * s));
  }
}

// SwiGLU on rows [gate (F) | up (F)]: out(N,F) = silu(g) up, silu(g) = g sig(g)
template <typename T>
void CpuBackend<T>::swiglu_forward(T* out, const T* inp, int N, int F) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * F > kParallelWork / 4)
  for (int n = 0; n < N; ++n) {
    const T* g = inp + static_cast<size_t>(n) * 2 * F;
    const T* u = g + F;
    T* o = out + static_cast<size_t>(n) * F;
#pragma omp simd
    for (int f = 0; f < F; ++f) o[f] = g[f] / (T(1) + exp_fast(-g[f])) * u[f];
  }
}

// dgate = dout up sig(g) (1 + g (1 - sig(g))),  dup = dout silu(g)   (dinp(N,2F) overwritten)
template <typename T>
void CpuBackend<T>::swiglu_backward(T* dinp, const T* inp, const T* dout, int N, int F) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * F > kParallelWork / 4)
  for (int n = 0; n < N; ++n) {
    const T* g = inp + static_cast<size_t>(n) * 2 * F;
    const T* u = g + F;
    const T* d = dout + static_cast<size_t>(n) * F;
    T* dg = dinp + static_cast<size_t>(n) * 2 * F;
    T* du = dg + F;
#pragma omp simd
    for (int f = 0; f < F; ++f) {
      const T e = exp_fast(-g[f]);
      const T s = T(1) / (T(1) + e);  // sig(g); 1 - sig(g) = e s
      dg[f] = d[f] * u[f] * s * (T(1) + g[f] * (e * s));
      du[f] = d[f] * g[f] * s;
    }
  }
}

#define MPITRAIN_INSTANTIATE(T)                                                                  \
  template CpuBackend<T>::CpuBackend(int);                                                       \
  template T* CpuBackend<T>::alloc(size_t);                                                      \
  template void CpuBackend<T>::free(T*);                                                         \
  template void CpuBackend<T>::zero(T*, size_t);                                                 \
  template void CpuBackend<T>::copy(T*, const T*, size_t);                                       \
  template void CpuBackend<T>::round_to(T*, size_t, Precision);                                  \
  template void CpuBackend<T>::embedding_forward(T*, const int32_t*, const T*, const T*, int, int, \
                                                 int, int, int);                                 \
  template void CpuBackend<T>::embedding_backward(T*, T*, const T*, const int32_t*, int, int,    \
                                                  int, int, int);                                \
  template void CpuBackend<T>::add(T*, const T*, const T*, size_t);                              \
  template void CpuBackend<T>::gelu_forward(T*, const T*, size_t);                               \
  template void CpuBackend<T>::gelu_backward(T*, const T*, const T*, size_t);                    \
  template void CpuBackend<T>::swiglu_forward(T*, const T*, int, int);                           \
  template void CpuBackend<T>::swiglu_backward(T*, const T*, const T*, int, int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
