// CPU backend: the optimizer's ops (sum of squares for the grad norm, scale, fused AdamW, SGD with
// momentum and the two passes of LAMB).
//
// Each op takes a step's whole segment list and runs one parallel loop over its pieces (Pieces:
// every segment cut as a call for that tensor alone would cut it), so a step starts one thread
// team per op, not one per tensor. The sums keep one partial per piece, added in piece order and
// then in segment order: the bits of per-tensor sums added in order, for any thread count.
//
// The fused updates run in blocks of kBlock elements. With AVX-512 the float path handles every
// element with the same vector instructions (the last, partial vector through masked loads and
// stores, not a scalar tail), so an element's result does not depend on where it lies in the
// call: a tensor updated whole, in pieces (ZeRO ranges) or split over tp ranks gets
// bit-identical elements. Elsewhere GCC vectorises the plain loops (this file is built
// with -fno-math-errno, CMakeLists.txt); its scalar tail does the same IEEE operations in the
// same order (no contraction into FMAs under -std=c++20), so the same holds.
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::kParallelWork;

// x *= s
template <typename T>
void CpuBackend<T>::scale(T* x, T s, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelWork)
  for (size_t i = 0; i < n; ++i) x[i] *= s;
}

namespace {

using cpu::Chunking;

constexpr size_t kBlock = 8192;  // elements per task of the fused updates

// The pieces a segment list is cut into, numbered over the list: segment s into cut(s).count
// pieces of cut(s).per elements from its start (the last shorter or empty).
class Pieces {
 public:
  template <class Cut>
  Pieces(Segments segments, Cut&& cut) : segments_(segments) {
    first_.reserve(segments.size() + 1);
    first_.push_back(0);
    for (const Segment& s : segments) {
      const Chunking c = cut(s);
      per_.push_back(c.per);
      first_.push_back(first_.back() + c.count);
    }
  }
  size_t size() const { return first_.back(); }
  size_t first(size_t s) const { return first_[s]; }  // segment s: [first(s), first(s + 1))
  struct Piece {
    size_t segment, at, n;  // elements [at, at + n) of the flat buffer
  };
  Piece operator[](size_t i) const {
    const size_t s = std::upper_bound(first_.begin(), first_.end(), i) - first_.begin() - 1;
    const Segment& seg = segments_[s];
    const size_t b = std::min(seg.n, (i - first_[s]) * per_[s]);
    return {s, seg.at + b, std::min(seg.n - b, per_[s])};
  }

 private:
  Segments segments_;
  std::vector<size_t> first_, per_;
};

// The cuts: blocks of the fused updates; chunks of the sum of squares (cpu::chunked_sum's);
// chunks of whole blocks for LAMB's sums.
Chunking blocks(const Segment& s) { return {(s.n + kBlock - 1) / kBlock, kBlock}; }
Chunking square_chunks(const Segment& s) { return cpu::chunking(s.n, kParallelWork); }
Chunking block_chunks(const Segment& s) {
  const Chunking c = cpu::chunking((s.n + kBlock - 1) / kBlock, 1);
  return {c.count, c.per * kBlock};
}

// f(index, piece) for every piece, in one parallel loop when `parallel` (pieces differ in size:
// dynamic schedule; each writes only its own elements and partials).
template <class F>
void for_pieces(const Pieces& pieces, bool parallel, F&& f) {
#pragma omp parallel for schedule(dynamic) if (parallel && pieces.size() > 1)
  for (size_t i = 0; i < pieces.size(); ++i) f(i, pieces[i]);
}

// sum x^2 over [0, n) in double: kLanes independent sums (vectorised: no reassociation needed),
// added in lane order; a single sum is one dependent chain of adds, at a third of the memory's
// rate.
template <typename T>
double sum_of_squares(const T* x, size_t n) {
  constexpr size_t kLanes = 16;
  double lane[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (size_t k = 0; k < kLanes; ++k)
      lane[k] += static_cast<double>(x[i + k]) * static_cast<double>(x[i + k]);
  double s = 0.0;
  for (size_t k = 0; k < kLanes; ++k) s += lane[k];
  for (; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
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

// Each segment's chunks in order, then the segments in order: the sum of one-segment calls.
template <typename T>
double CpuBackend<T>::sum_squares(const T* x, Segments segments) {
  const Pieces chunks(segments, square_chunks);
  std::vector<double> partial(chunks.size());
  for_pieces(chunks, elements(segments) > kParallelWork,
             [&](size_t i, const Pieces::Piece& c) { partial[i] = sum_of_squares(x + c.at, c.n); });
  double sum = 0.0;
  for (size_t s = 0; s < segments.size(); ++s) {
    double segment = 0.0;
    for (size_t i = chunks.first(s); i < chunks.first(s + 1); ++i) segment += partial[i];
    sum += segment;
  }
  return sum;
}

// The compute copy of a block just updated (still in L1): rounded's elements [at, at + n) =
// param's, rounded as convert() rounds them; nothing where rounded is null.
template <typename T>
void round_block(Buf<T> rounded, const T* param, size_t at, size_t n) {
  if (rounded) cpu::narrow_row(rounded + at, param + at, n);
}

template <typename T>
void CpuBackend<T>::adamw(T* param, const T* grad, T* m, T* v, Segments segments, float lr,
                          float beta1, float beta2, float eps, float weight_decay, int t,
                          float grad_scale, Buf<T> rounded) {
  const T bc1 = bias_correction<T>(beta1, t), bc2 = bias_correction<T>(beta2, t);
  check_rounded(rounded);
  for_pieces(Pieces(segments, blocks), elements(segments) > kParallelWork / 4,
             [&](size_t, const Pieces::Piece& b) {
               const float wd = segments[b.segment].decay ? weight_decay : 0.0f;
               adamw_block<T>(param + b.at, grad + b.at, m + b.at, v + b.at, b.n, lr, beta1, beta2,
                              eps, wd, bc1, bc2, grad_scale);
               round_block(rounded, param, b.at, b.n);
             });
}

template <typename T>
void CpuBackend<T>::sgd_momentum(T* param, const T* grad, T* buf, Segments segments, float lr,
                                 float momentum, float weight_decay, float grad_scale,
                                 Buf<T> rounded) {
  check_rounded(rounded);
  for_pieces(Pieces(segments, blocks), elements(segments) > kParallelWork / 4,
             [&](size_t, const Pieces::Piece& b) {
               const float wd = segments[b.segment].decay ? weight_decay : 0.0f;
               sgd_block<T>(param + b.at, grad + b.at, buf + b.at, b.n, lr, momentum, wd,
                            grad_scale);
               round_block(rounded, param, b.at, b.n);
             });
}

// Each segment's sums over its chunks of whole blocks, each chunk's blocks in order, the chunks
// added in order (the chunking depends only on the segment's size).
template <typename T>
void CpuBackend<T>::lamb_moments(T* param, const T* grad, T* m, T* v, Segments segments, float lr,
                                 float beta1, float beta2, float eps, float weight_decay, int t,
                                 float grad_scale, double* sums) {
  const T bc1 = bias_correction<T>(beta1, t), bc2 = bias_correction<T>(beta2, t);
  const Pieces chunks(segments, block_chunks);
  std::vector<double> partial(2 * chunks.size(), 0.0);
  for_pieces(chunks, elements(segments) > kParallelWork / 4, [&](size_t i, const Pieces::Piece& c) {
    const bool decay = segments[c.segment].decay;
    for (size_t j = c.at; j < c.at + c.n; j += kBlock) {
      const size_t k = std::min(kBlock, c.at + c.n - j);
      if (decay)
        lamb_moments_block<T>(param + j, grad + j, m + j, v + j, k, beta1, beta2, eps, weight_decay,
                              bc1, bc2, grad_scale, &partial[2 * i]);
      else  // trust ratio 1: the AdamW step
        adamw_block<T>(param + j, grad + j, m + j, v + j, k, lr, beta1, beta2, eps, 0.0f, bc1, bc2,
                       grad_scale);
    }
  });
  for (size_t s = 0; s < segments.size(); ++s) {
    sums[2 * s] = sums[2 * s + 1] = 0.0;
    for (size_t i = chunks.first(s); i < chunks.first(s + 1); ++i) {
      sums[2 * s] += partial[2 * i];
      sums[2 * s + 1] += partial[2 * i + 1];
    }
  }
}

template <typename T>
void CpuBackend<T>::lamb_update(T* param, const T* m, const T* v, Segments segments,
                                const float* lr, float beta1, float beta2, float eps,
                                float weight_decay, int t) {
  const T bc1 = bias_correction<T>(beta1, t), bc2 = bias_correction<T>(beta2, t);
  for_pieces(Pieces(segments, blocks), elements(segments) > kParallelWork / 4,
             [&](size_t, const Pieces::Piece& b) {
               if (segments[b.segment].decay)
                 lamb_update_block<T>(param + b.at, m + b.at, v + b.at, b.n, lr[b.segment], eps,
                                      weight_decay, bc1, bc2);
             });
}

#define MPITRAIN_INSTANTIATE(T)                                                                   \
  template double CpuBackend<T>::sum_squares(const T*, Segments);                                 \
  template void CpuBackend<T>::scale(T*, T, size_t);                                              \
  template void CpuBackend<T>::adamw(T*, const T*, T*, T*, Segments, float, float, float, float,  \
                                     float, int, float, Buf<T>);                                  \
  template void CpuBackend<T>::sgd_momentum(T*, const T*, T*, Segments, float, float, float,      \
                                            float, Buf<T>);                                       \
  template void CpuBackend<T>::lamb_moments(T*, const T*, T*, T*, Segments, float, float, float,  \
                                            float, float, int, float, double*);                   \
  template void CpuBackend<T>::lamb_update(T*, const T*, const T*, Segments, const float*, float, \
                                           float, float, float, int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
