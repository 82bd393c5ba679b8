// CPU backend: bf16 tile products (cpu_bf16_tiles.hpp). This file is compiled for AVX512-BF16
// whatever the build's -march (the pragma below, after every include, so that no inline function
// of a header is emitted here with those instructions); the backend calls it only where the CPU
// has them. Everything but the entry points is in an anonymous namespace, and no std:: template
// is instantiated here, for the same reason.
//
// The product runs blocks of MR rows x NV vectors of 16 columns, their MR x NV sums in registers
// (24 of the 32), over the k pairs: NV vectors of B loaded, each of the MR rows' pair word of A
// broadcast, MR x NV VDPBF16PS. At attention's tiles (32 x 32 x 64, 32 x 64 x 32) it ran at
// 356 and 310 GFLOP/s on one thread of an AMD EPYC Zen 5, against 150 for OpenBLAS's SkylakeX
// sgemm on the same tiles in fp32.
#include "cpu_bf16_tiles.hpp"

#include <immintrin.h>

#include <utility>

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

#include "cpu_tile_lanes_avx512.hpp"
#include "cpu_tile_product.hpp"

namespace mpitrain::cpu {

namespace {

// A step of VDPBF16PS: a pair of bf16 along K in each word (cpu_tile_product.hpp).
struct Bf16Pairs {
  using Lanes = Avx512Lanes;
  using Word = uint32_t;
  using Vector = __m512bh;
  static Vector b(const Word* p) { return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p)); }
  static Vector b(const Word* p, __mmask16 k) {
    return reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi32(k, p));
  }
  static Vector a(Word w) {
    return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(w)));
  }
  static __m512 madd(__m512 s, Vector a, Vector b) { return _mm512_dpbf16_ps(s, a, b); }
};

// 16 pair words: x[0, 32) rounded to bf16 (round to nearest even), zero past n floats.
__m512i pairs_of(const float* x, int n) {
  const __m512 lo = _mm512_maskz_loadu_ps(Avx512Lanes::first(n), x);
  const __m512 hi = _mm512_maskz_loadu_ps(Avx512Lanes::first(n - 16), x + 16);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

}  // namespace

void pack_pairs(const float* A, size_t ld, int m, int K, uint32_t* out) {
  const int k2 = pair_count(K);
  for (int r = 0; r < m; ++r)
    for (int t = 0; t < k2; t += 16)
      _mm512_mask_storeu_epi32(out + static_cast<size_t>(r) * k2 + t, Avx512Lanes::first(k2 - t),
                               pairs_of(A + r * ld + 2 * t, K - 2 * t));
}

void pack_pairs_by_rows(const float* B, size_t ld, int K, int n, uint32_t* out) {
  // word j of a pair row: the even row's bf16 low, the odd row's high
  alignas(64) static const uint16_t interleave[32] = {0,  16, 1,  17, 2,  18, 3,  19, 4,  20, 5,
                                                      21, 6,  22, 7,  23, 8,  24, 9,  25, 10, 26,
                                                      11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(interleave);
  const int ldb = pair_ld(n);
  for (int t = 0; 2 * t < K; ++t) {
    const float* even = B + 2 * t * ld;
    const float* odd = even + ld;
    const bool has_odd = 2 * t + 1 < K;
    for (int j = 0; j < ldb; j += 16) {
      const __mmask16 k = Avx512Lanes::first(n - j);
      const __m512 e = _mm512_maskz_loadu_ps(k, even + j);
      const __m512 o = has_odd ? _mm512_maskz_loadu_ps(k, odd + j) : _mm512_setzero_ps();
      _mm512_storeu_si512(
          out + static_cast<size_t>(t) * ldb + j,
          _mm512_permutexvar_epi16(idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(o, e))));
    }
  }
}

void pack_pairs_transposed(const float* X, size_t ld, int n, int K, uint32_t* out) {
  transpose_rows_of<Avx512Lanes>(n, pair_count(K), out, pair_ld(n), [X, ld, K](int j, int t0) {
    return pairs_of(X + j * ld + 2 * t0, K - 2 * t0);
  });
}

void bf16_tile_product(int m, int n, int k2, const uint32_t* a, size_t a_row, size_t a_pair,
                       const uint32_t* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  tile_product<Bf16Pairs>(m, n, k2, a, a_row, a_pair, b, ldb, C, ldc, accumulate);
}

}  // namespace mpitrain::cpu

#pragma GCC pop_options
