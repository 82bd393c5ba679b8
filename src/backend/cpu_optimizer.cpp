// CPU backend: the optimizer's ops (sum of squares for the grad norm, scale, fused AdamW).
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
    double s = 0.0;
#pragma omp simd reduction(+ : s)
    for (size_t i = b; i < e; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
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

// g = grad_scale grad;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
// p -= lr (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p)           (one fused pass)
template <typename T>
void adamw_block(T* __restrict param, const T* __restrict grad, T* __restrict m,
                 T* __restrict v, size_t n, T lr, T b1, T b2, T eps, T wd, T bc1, T bc2, T gs) {
  size_t i = 0;
#if defined(__AVX512F__)
  // GCC does not vectorise std::sqrt unless built with -fno-math-errno (the errno path is a
  // branch), so the float path is written out with AVX-512 intrinsics; same math, same order.
  if constexpr (std::is_same_v<T, float>) {
    const __m512 vb1 = _mm512_set1_ps(b1), vb2 = _mm512_set1_ps(b2), vc1 = _mm512_set1_ps(1 - b1),
                 vc2 = _mm512_set1_ps(1 - b2), vlr = _mm512_set1_ps(lr),
                 veps = _mm512_set1_ps(eps), vwd = _mm512_set1_ps(wd),
                 vbc1 = _mm512_set1_ps(bc1), vbc2 = _mm512_set1_ps(bc2), vgs = _mm512_set1_ps(gs);
    for (; i + 16 <= n; i += 16) {
      const __m512 g = _mm512_mul_ps(_mm512_loadu_ps(grad + i), vgs);
      const __m512 mi = _mm512_add_ps(_mm512_mul_ps(vb1, _mm512_loadu_ps(m + i)),
                                      _mm512_mul_ps(vc1, g));
      const __m512 vi = _mm512_add_ps(_mm512_mul_ps(vb2, _mm512_loadu_ps(v + i)),
                                      _mm512_mul_ps(_mm512_mul_ps(vc2, g), g));
      _mm512_storeu_ps(m + i, mi);
      _mm512_storeu_ps(v + i, vi);
      const __m512 p = _mm512_loadu_ps(param + i);
      // (masked form: GCC 12 flags _mm512_sqrt_ps's undefined pass-through as uninitialised)
      const __m512 vhat = _mm512_mul_ps(vi, vbc2);
      const __m512 den = _mm512_add_ps(_mm512_mask_sqrt_ps(vhat, 0xFFFF, vhat), veps);
      const __m512 upd = _mm512_add_ps(_mm512_div_ps(_mm512_mul_ps(mi, vbc1), den),
                                       _mm512_mul_ps(vwd, p));
      _mm512_storeu_ps(param + i, _mm512_sub_ps(p, _mm512_mul_ps(vlr, upd)));
    }
  }
#endif
  for (; i < n; ++i) {
    const T g = grad[i] * gs;
    const T mi = b1 * m[i] + (T(1) - b1) * g;
    const T vi = b2 * v[i] + (T(1) - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * bc1 / (std::sqrt(vi * bc2) + eps) + wd * param[i]);
  }
}

}  // namespace

template <typename T>
void CpuBackend<T>::adamw(T* param, const T* grad, T* m, T* v, size_t n, float lr, float beta1,
                          float beta2, float eps, float weight_decay, int t, float grad_scale) {
  const T bc1 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(beta1), t)));
  const T bc2 = static_cast<T>(1.0 / (1.0 - std::pow(static_cast<double>(beta2), t)));
  constexpr size_t kBlock = 8192;
#pragma omp parallel for schedule(static) if (n > kParallelWork / 4)
  for (size_t i = 0; i < n; i += kBlock)
    adamw_block<T>(param + i, grad + i, m + i, v + i, std::min(kBlock, n - i), lr, beta1, beta2,
                   eps, weight_decay, bc1, bc2, grad_scale);
}

#define MPITRAIN_INSTANTIATE(T)                                                             \
  template double CpuBackend<T>::sum_squares(const T*, size_t);                             \
  template void CpuBackend<T>::scale(T*, T, size_t);                                        \
  template void CpuBackend<T>::adamw(T*, const T*, T*, T*, size_t, float, float, float, float, \
                                     float, int, float);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
