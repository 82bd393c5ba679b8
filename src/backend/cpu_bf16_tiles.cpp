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

namespace mpitrain::cpu {

namespace {

int smaller(int a, int b) { return a < b ? a : b; }
int within(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
__mmask16 first(int n) {  // the mask of the first n (0..16) of 16 lanes
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << within(n, 0, 16)) - 1u);
}

// 16 pair words: x[0, 32) rounded to bf16 (round to nearest even), zero past n floats.
__m512i pairs_of(const float* x, int n) {
  const __m512 lo = _mm512_maskz_loadu_ps(first(n), x);
  const __m512 hi = _mm512_maskz_loadu_ps(first(n - 16), x + 16);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// rows r[0, 16) of 32-bit words transposed in place: at each step the off-diagonal b x b blocks
// of every 2b x 2b block swap (the top right takes the bottom left's words and the other way).
void transpose16(__m512i r[16]) {
  for (int b = 8; b >= 1; b /= 2) {
    alignas(64) int top[16], bottom[16];
    for (int c = 0; c < 16; ++c) {
      top[c] = (c & b) ? 16 + c - b : c;
      bottom[c] = (c & b) ? 16 + c : c + b;
    }
    const __m512i it = _mm512_load_si512(top), ib = _mm512_load_si512(bottom);
    for (int i = 0; i < 16; ++i) {
      if (i & b) continue;
      const __m512i t = _mm512_permutex2var_epi32(r[i], it, r[i + b]);
      r[i + b] = _mm512_permutex2var_epi32(r[i], ib, r[i + b]);
      r[i] = t;
    }
  }
}

// C (MR x 16 NV, the last vector's columns masked by last) (+)= A B over k2 pairs.
template <int MR, int NV>
void block(const uint32_t* a, size_t a_row, size_t a_pair, const uint32_t* b, size_t ldb, int k2,
           float* C, size_t ldc, __mmask16 last, bool accumulate) {
  __m512 s[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  for (int t = 0; t < k2; ++t) {
    __m512bh bv[NV];
    for (int v = 0; v < NV; ++v)
      bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(b + t * ldb + 16 * v));
    for (int r = 0; r < MR; ++r) {
      const __m512bh av = reinterpret_cast<__m512bh>(
          _mm512_set1_epi32(static_cast<int>(a[r * a_row + t * a_pair])));
      for (int v = 0; v < NV; ++v) s[r][v] = _mm512_dpbf16_ps(s[r][v], av, bv[v]);
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) {
      const __mmask16 k = v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
      float* c = C + r * ldc + 16 * v;
      const __m512 x = accumulate ? _mm512_add_ps(s[r][v], _mm512_maskz_loadu_ps(k, c)) : s[r][v];
      _mm512_mask_storeu_ps(c, k, x);
    }
}

// The m rows in blocks of MR, the last m % MR through block<m % MR, NV>.
template <int NV, int MR>
void rows(int m, const uint32_t* a, size_t a_row, size_t a_pair, const uint32_t* b, size_t ldb,
          int k2, float* C, size_t ldc, __mmask16 last, bool accumulate) {
  int r = 0;
  for (; r + MR <= m; r += MR)
    block<MR, NV>(a + r * a_row, a_row, a_pair, b, ldb, k2, C + r * ldc, ldc, last, accumulate);
  const int left = m - r;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((left == I + 1 ? block<I + 1, NV>(a + r * a_row, a_row, a_pair, b, ldb, k2, C + r * ldc, ldc,
                                       last, accumulate)
                    : void()),
     ...);
  }
  (std::make_integer_sequence<int, MR - 1>{});
}

}  // namespace

void pack_pairs(const float* A, size_t ld, int m, int K, uint32_t* out) {
  const int k2 = pair_count(K);
  for (int r = 0; r < m; ++r)
    for (int t = 0; t < k2; t += 16)
      _mm512_mask_storeu_epi32(out + static_cast<size_t>(r) * k2 + t, first(k2 - t),
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
      const __mmask16 k = first(n - j);
      const __m512 e = _mm512_maskz_loadu_ps(k, even + j);
      const __m512 o = has_odd ? _mm512_maskz_loadu_ps(k, odd + j) : _mm512_setzero_ps();
      _mm512_storeu_si512(
          out + static_cast<size_t>(t) * ldb + j,
          _mm512_permutexvar_epi16(idx, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(o, e))));
    }
  }
}

void pack_pairs_transposed(const float* X, size_t ld, int n, int K, uint32_t* out) {
  const int k2 = pair_count(K), ldb = pair_ld(n);
  for (int j0 = 0; j0 < ldb; j0 += 16)
    for (int t0 = 0; t0 < k2; t0 += 16) {
      __m512i r[16];  // r[i]: pair words t0.. of X's row j0 + i
      for (int i = 0; i < 16; ++i)
        r[i] =
            j0 + i < n ? pairs_of(X + (j0 + i) * ld + 2 * t0, K - 2 * t0) : _mm512_setzero_si512();
      transpose16(r);  // r[i]: pair word t0 + i of the rows j0..
      for (int i = 0; i < smaller(16, k2 - t0); ++i)
        _mm512_storeu_si512(out + static_cast<size_t>(t0 + i) * ldb + j0, r[i]);
    }
}

void bf16_tile_product(int m, int n, int k2, const uint32_t* a, size_t a_row, size_t a_pair,
                       const uint32_t* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  for (int j = 0; j < n; j += 64) {  // 64 columns (4 vectors) at a time
    const int w = smaller(64, n - j), nv = (w + 15) / 16;
    const __mmask16 last = first(w - 16 * (nv - 1));
    switch (nv) {
      case 1:
        rows<1, 12>(m, a, a_row, a_pair, b + j, ldb, k2, C + j, ldc, last, accumulate);
        break;
      case 2:
        rows<2, 12>(m, a, a_row, a_pair, b + j, ldb, k2, C + j, ldc, last, accumulate);
        break;
      case 3:
        rows<3, 8>(m, a, a_row, a_pair, b + j, ldb, k2, C + j, ldc, last, accumulate);
        break;
      default:
        rows<4, 6>(m, a, a_row, a_pair, b + j, ldb, k2, C + j, ldc, last, accumulate);
    }
  }
}

}  // namespace mpitrain::cpu

#pragma GCC pop_options
