// CPU backend: the optimizer's ops (sum of squares for the grad norm, scale, fused AdamW, SGD with
// momentum and the two passes of LAMB).
//
// The fused updates run in blocks of kBlock elements, in parallel over blocks. With AVX-512 the
// float path handles every element with the same vector instructions (the last, partial vector
// through masked loads and stores, not a scalar tail), so an element's result does not depend on
// where it lies in the call: a tensor updated whole, in pieces (ZeRO ranges) or split over tp
// ranks gets bit-identical elements. Elsewhere GCC vectorises the plain loops (this file is built
// with -fno-math-errno, CMakeLists.txt); its scalar tail does the same IEEE operations in the
// same order (no contraction into FMAs under -std=c++20), so the same holds.
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <cmath>
#include <type_traits>

#include "cpu_kernels.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::kParallelWork;

// sum x^2 in double, over fixed chunks (deterministic for any thread count)
template <typename T>
double CpuBackend<T>::sum_squares(const T* x, size_t n) {
  return cpu::chunked_sum(n, kParallelWork, [x](size_t b, size_t e) {
    // kLanes independent sums (vectorised: no reassociation needed), added in lane order; a
    // single sum is one dependent chain of adds, at a third of the memory's rate.
    constexpr size_t kLanes = 16;
    double lane[kLanes] = {};
    size_t i = b;
    for (; i + kLanes <= e; i += kLanes)
      for (size_t k = 0; k < kLanes; ++k)
        lane[k] += static_cast<double>(x[i + k]) * static_cast<double>(x[i + k]);
    double s = 0.0;
    for (size_t k = 0; k < kLanes; ++k) s += lane[k];
    for (; i < e; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return s;
  });
}

// x *= s
template <typename T>
void CpuBackend<T>::scale(T* x, T s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

namespace {

constexpr size_t kBlock = 8192;  // elements per task of the fused updates

// f(begin, count) over blocks of [0, n), in parallel when n is large.
template <class F>
void for_blocks(size_t n, F&& f) {
#pragma omp parallel for schedule(static) if (n > kParallelWork / 4)
  for (size_t i = 0; i < n; i += kBlock) f(i, std::min(kBlock, n - i));
}

// Adam's bias corrections 1/(1-b^t), in double, then rounded to T.
template <typename T>
T bias_correction(float beta, int t) {
  return static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(beta), t)));
}

// u = m bc1 / (sqrt(v bc2) + eps) + wd p: the AdamW / LAMB update direction.
template <typename T>
T adam_direction(T m, T v, T p, T bc1, T bc2, T eps, T wd) {
  return m * bc1 / (std::sqrt(v * bc2) + eps) + wd * p;
}

#if defined(__AVX512F__)
// 16 float lanes; the mask of the first k of them (all for k >= 16).
__mmask16 lanes(size_t k) {
  return k >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << k) - 1u);
}
__m512 load(const float* p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
void store(float* p, __m512 x, __mmask16 k) { _mm512_mask_storeu_ps(p, k, x); }

// The vector form of adam_direction (same operations, same order). GCC does not vectorise
// std::sqrt unless built with -fno-math-errno, hence intrinsics. (Masked sqrt: GCC 12 flags
// _mm512_sqrt_ps's undefined pass-through as uninitialised.)
__m512 adam_direction16(__m512 m, __m512 v, __m512 p, __m512 bc1, __m512 bc2, __m512 eps,
                        __m512 wd) {
  const __m512 vhat = _mm512_mul_ps(v, bc2);
  const __m512 den = _mm512_add_ps(_mm512_mask_sqrt_ps(vhat, 0xFFFF, vhat), eps);
  return _mm512_add_ps(_mm512_div_ps(_mm512_mul_ps(m, bc1), den), _mm512_mul_ps(wd, p));
}

// acc += x^2 in double for the 16 lanes of x, as two 8-lane halves. GCC's vector extensions:
// its AVX-512 conversion intrinsics trip the same uninitialised pass-through warning.
typedef float F32x8 __attribute__((vector_size(32)));
typedef double F64x8 __attribute__((vector_size(64)));
void add_squares(F64x8& acc, __m512 x) {
  const __v16sf v = reinterpret_cast<__v16sf>(x);
  const F64x8 lo =
      __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), F64x8);
  const F64x8 hi =
      __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), F64x8);
  acc += lo * lo + hi * hi;
}
double lane_sum(F64x8 acc) {  // in lane order
  double s = 0.0;
  for (int k = 0; k < 8; ++k) s += acc[k];
  return s;
}
#endif

// g = gs grad;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;  p -= lr u   (one fused pass)
template <typename T>
void adamw_block(T* __restrict param, const T* __restrict grad, T* __restrict m, T* __restrict v,
                 size_t n, T lr, T b1, T b2, T eps, T wd, T bc1, T bc2, T gs) {
  size_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), vc1 = _mm512_set1_ps(1 - b1),
                 vc2 = _mm512_set1_ps(1 - b2), vlr = _mm512_set1_ps(lr), veps = _mm512_set1_ps(eps),
                 vwd = _mm512_set1_ps(wd), vbc1 = _mm512_set1_ps(bc1), vbc2 = _mm512_set1_ps(bc2),
                 vgs = _mm512_set1_ps(gs);
    for (; i < n; i += 16) {
      const __mmask16 k = lanes(n - i);
      const __m512 g = _mm512_mul_ps(load(grad + i, k), vgs);
      const __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, load(m + i, k)), _mm512_mul_ps(vc1, g));
      const __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, load(v + i, k)),
                                      _mm512_mul_ps(_mm512_mul_ps(vc2, g), g));
      store(m + i, mi, k);
      store(v + i, vi, k);
      const __m512 p = load(param + i, k);
      const __m512 u = adam_direction16(mi, vi, p, vbc1, vbc2, veps, vwd);
      store(param + i, _mm512_sub_ps(p, _mm512_mul_ps(vlr, u)), k);
    }
  }
#endif
  for (; i < n; ++i) {
    const T g = grad[i] * gs;
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * adam_direction(mi, vi, param[i], bc1, bc2, eps, wd);
  }
}

// g = gs grad;  buf = mu buf + g;  p -= lr (buf + wd p)
template <typename T>
void sgd_block(T* __restrict param, const T* __restrict grad, T* __restrict buf, size_t n, T lr,
               T mu, T wd, T gs) {
  size_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 vlr = _mm512_set1_ps(lr), vmu = _mm512_set1_ps(mu), vwd = _mm512_set1_ps(wd),
                 vgs = _mm512_set1_ps(gs);
    for (; i < n; i += 16) {
      const __mmask16 k = lanes(n - i);
      const __m512 g = _mm512_mul_ps(load(grad + i, k), vgs);
      const __m512 b = _mm512_add_ps(_mm512_mul_ps(vmu, load(buf + i, k)), g);
      store(buf + i, b, k);
      const __m512 p = load(param + i, k);
      store(param + i,
            _mm512_sub_ps(p, _mm512_mul_ps(vlr, _mm512_add_ps(b, _mm512_mul_ps(vwd, p)))), k);
    }
  }
#endif
  for (; i < n; ++i) {
    const T b = mu * buf[i] + grad[i] * gs;
    buf[i] = b;
    param[i] -= lr * (b + wd * param[i]);
  }
}

// LAMB's first pass over one block: m and v as in adamw_block; sums += {p^2, u^2}.
template <typename T>
void lamb_moments_block(const T* __restrict param, const T* __restrict grad, T* __restrict m,
                        T* __restrict v, size_t n, T b1, T b2, T eps, T wd, T bc1, T bc2, T gs,
                        double sums[2]) {
  size_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), vc1 = _mm512_set1_ps(1 - b1),
                 vc2 = _mm512_set1_ps(1 - b2), veps = _mm512_set1_ps(eps), vwd = _mm512_set1_ps(wd),
                 vbc1 = _mm512_set1_ps(bc1), vbc2 = _mm512_set1_ps(bc2), vgs = _mm512_set1_ps(gs);
    F64x8 pp = {}, uu = {};
    for (; i < n; i += 16) {
      const __mmask16 k = lanes(n - i);
      const __m512 g = _mm512_mul_ps(load(grad + i, k), vgs);
      const __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, load(m + i, k)), _mm512_mul_ps(vc1, g));
      const __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, load(v + i, k)),
                                      _mm512_mul_ps(_mm512_mul_ps(vc2, g), g));
      store(m + i, mi, k);
      store(v + i, vi, k);
      const __m512 p = load(param + i, k);
      // lanes beyond n are zeroed: they must not add to the sums (eps = 0 would make them NaN)
      const __m512 u = _mm512_maskz_mov_ps(k, adam_direction16(mi, vi, p, vbc1, vbc2, veps, vwd));
      add_squares(pp, p);
      add_squares(uu, u);
    }
    sums[0] += lane_sum(pp);
    sums[1] += lane_sum(uu);
  }
#endif
  double pp = 0.0, uu = 0.0;
  for (; i < n; ++i) {
    const T g = grad[i] * gs;
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const T u = adam_direction(mi, vi, param[i], bc1, bc2, eps, wd);
    pp += static_cast<double>(param[i]) * static_cast<double>(param[i]);
    uu += static_cast<double>(u) * static_cast<double>(u);
  }
  sums[0] += pp;
  sums[1] += uu;
}

// LAMB's second pass over one block: p -= lr u.
template <typename T>
void lamb_update_block(T* __restrict param, const T* __restrict m, const T* __restrict v, size_t n,
                       T lr, T eps, T wd, T bc1, T bc2) {
  size_t i = 0;
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<T, float>) {
    const __m512 vlr = _mm512_set1_ps(lr), veps = _mm512_set1_ps(eps), vwd = _mm512_set1_ps(wd),
                 vbc1 = _mm512_set1_ps(bc1), vbc2 = _mm512_set1_ps(bc2);
    for (; i < n; i += 16) {
      const __mmask16 k = lanes(n - i);
      const __m512 p = load(param + i, k);
      const __m512 u = adam_direction16(load(m + i, k), load(v + i, k), p, vbc1, vbc2, veps, vwd);
      store(param + i, _mm512_sub_ps(p, _mm512_mul_ps(vlr, u)), k);
    }
  }
#endif
  for (; i < n; ++i) param[i] -= lr * adam_direction(m[i], v[i], param[i], bc1, bc2, eps, wd);
}

}  // namespace

template <typename T>
void CpuBackend<T>::adamw(T* param, const T* grad, T* m, T* v, size_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int t, float grad_scale) {
  const T bc1 = bias_correction<T>(beta1, t), bc2 = bias_correction<T>(beta2, t);
  for_blocks(n, [&](size_t i, size_t k) {
    adamw_block<T>(param + i, grad + i, m + i, v + i, k, lr, beta1, beta2, eps, weight_decay, bc1,
                   bc2, grad_scale);
  });
}

template <typename T>
void CpuBackend<T>::sgd_momentum(T* param, const T* grad, T* buf, size_t n, float lr,
                                 float momentum, float weight_decay, float grad_scale) {
  for_blocks(n, [&](size_t i, size_t k) {
    sgd_block<T>(param + i, grad + i, buf + i, k, lr, momentum, weight_decay, grad_scale);
  });
}

// The sums over fixed chunks of whole blocks (the chunking depends only on n: deterministic for
// any thread count), each chunk's blocks in order.
template <typename T>
void CpuBackend<T>::lamb_moments(const T* param, const T* grad, T* m, T* v, size_t n, float beta1,
                                 float beta2, float eps, float weight_decay, int t,
                                 float grad_scale, double sums[2]) {
  const T bc1 = bias_correction<T>(beta1, t), bc2 = bias_correction<T>(beta2, t);
  constexpr size_t kMaxChunks = 64;
  const size_t blocks = (n + kBlock - 1) / kBlock;
  const size_t chunks = std::clamp<size_t>(blocks, 1, kMaxChunks);
  const size_t per = (blocks + chunks - 1) / chunks * kBlock;  // elements per chunk
  double partial[kMaxChunks][2] = {};
#pragma omp parallel for schedule(static) if (n > kParallelWork / 4)
  for (size_t c = 0; c < chunks; ++c)
    for (size_t i = c * per; i < std::min(n, (c + 1) * per); i += kBlock)
      lamb_moments_block<T>(param + i, grad + i, m + i, v + i, std::min(kBlock, n - i), beta1,
                            beta2, eps, weight_decay, bc1, bc2, grad_scale, partial[c]);
  sums[0] = sums[1] = 0.0;
  for (size_t c = 0; c < chunks; ++c) {
    sums[0] += partial[c][0];
    sums[1] += partial[c][1];
  }
}

template <typename T>
void CpuBackend<T>::lamb_update(T* param, const T* m, const T* v, size_t n, float lr, float beta1,
                                float beta2, float eps, float weight_decay, int t) {
  const T bc1 = bias_correction<T>(beta1, t), bc2 = bias_correction<T>(beta2, t);
  for_blocks(n, [&](size_t i, size_t k) {
    lamb_update_block<T>(param + i, m + i, v + i, k, lr, eps, weight_decay, bc1, bc2);
  });
}

#define MPITRAIN_INSTANTIATE(T)                                                                    \
  template double CpuBackend<T>::sum_squares(const T*, size_t);                                    \
  template void CpuBackend<T>::scale(T*, T, size_t);                                               \
  template void CpuBackend<T>::adamw(T*, const T*, T*, T*, size_t, float, float, float, float,     \
                                     float, int, float);                                           \
  template void CpuBackend<T>::sgd_momentum(T*, const T*, T*, size_t, float, float, float, float); \
  template void CpuBackend<T>::lamb_moments(const T*, const T*, T*, T*, size_t, float, float,      \
                                            float, float, int, float, double[2]);                  \
  template void CpuBackend<T>::lamb_update(T*, const T*, const T*, size_t, float, float, float,    \
                                           float, float, int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
