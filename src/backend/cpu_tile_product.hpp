// Private helper of the CPU backend's attention tiles (cpu_bf16_tiles.cpp, cpu_fp32_tiles.cpp):
// the register-blocked AVX-512 product C (m x n, fp32; ldc) = A B, or C += A B where accumulate,
// over k steps of what a Step multiplies:
//   Step::Word       the element of A and B a step reads (a float, or a pair of bf16)
//   Step::Vector     16 of B's words, as the multiply takes them
//   Step::b(p, k)    B's 16 words at p, those past the mask k zero
//   Step::a(w)       A's word w broadcast to a Vector
//   Step::madd(s, a, b)   s + a b, 16 fp32 sums
// A word (r, t) is a[r a_row + t a_k] (a row-major A: a_row its ld, a_k 1; an A stored transposed:
// a_row 1, a_k its ld); B word (t, j) is b[t ldb + j].
//
// Blocks of MR rows x NV vectors of 16 columns keep their MR x NV sums in registers (24 of the
// 32): at each step NV vectors of B are loaded, each of the MR rows' word of A broadcast, and
// MR x NV multiplies issued. This header is included by those two files after their target
// pragma (and after every header they include), so that each compiles it for its own
// instructions; everything is in an unnamed namespace, so no copy is shared between them.
#pragma once

namespace mpitrain::cpu {
namespace {

int smaller(int a, int b) { return a < b ? a : b; }
int within(int x, int lo, int hi) { return x < lo ? lo : (x > hi ? hi : x); }
__mmask16 first(int n) {  // the mask of the first n (0..16) of 16 lanes
  return static_cast<__mmask16>(n >= 16 ? 0xFFFFu : (1u << within(n, 0, 16)) - 1u);
}

// The word indices of transpose16's step B (permutex2var: 16 + c is the second row's word c):
// a pair's top row keeps its words c without B and takes the bottom row's c - B for those with;
// the bottom row takes the top's c + B and keeps those with. Constants, built from C = 0..15.
template <int B, int... C>
__m512i swap_top(std::integer_sequence<int, C...>) {
  return reinterpret_cast<__m512i>(__v16si{((C & B) ? 16 + C - B : C)...});
}
template <int B, int... C>
__m512i swap_bottom(std::integer_sequence<int, C...>) {
  return reinterpret_cast<__m512i>(__v16si{((C & B) ? 16 + C : C + B)...});
}

// Step B of transpose16: in every 2B x 2B block the off-diagonal B x B blocks swap (the top
// right takes the bottom left's words and the other way), rows i and i + B at a time.
template <int B>
void transpose_step(__m512i r[16]) {
  const auto words = std::make_integer_sequence<int, 16>{};
  const __m512i top = swap_top<B>(words), bottom = swap_bottom<B>(words);
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    if (i & B) continue;
    const __m512i t = _mm512_permutex2var_epi32(r[i], top, r[i + B]);
    r[i + B] = _mm512_permutex2var_epi32(r[i], bottom, r[i + B]);
    r[i] = t;
  }
}

// rows r[0, 16) of 32-bit words transposed in place, in four steps.
inline void transpose16(__m512i r[16]) {
  transpose_step<8>(r);
  transpose_step<4>(r);
  transpose_step<2>(r);
  transpose_step<1>(r);
}

// out (k rows of ldo words; ldo a multiple of 16) = the transpose of n rows of k 32-bit words,
// words(j, t0) giving the 16 words from t0 of row j (zero past k); the words past n zero.
template <typename W, class Words>
void transpose_rows_of(int n, int k, W* out, int ldo, Words&& words) {
  for (int j0 = 0; j0 < ldo; j0 += 16)
    for (int t0 = 0; t0 < k; t0 += 16) {
      __m512i r[16];  // r[i]: words t0.. of row j0 + i
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) r[i] = j0 + i < n ? words(j0 + i, t0) : _mm512_setzero_si512();
      transpose16(r);  // r[i]: word t0 + i of the rows j0..
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i)
        if (t0 + i < k) _mm512_storeu_si512(out + static_cast<size_t>(t0 + i) * ldo + j0, r[i]);
    }
}

// C (MR x 16 NV, the last vector's columns masked by last) (+)= A B over k steps.
template <class Step, int MR, int NV>
void tile_block(const typename Step::Word* a, size_t a_row, size_t a_k,
                const typename Step::Word* b, size_t ldb, int k, float* C, size_t ldc,
                __mmask16 last, bool accumulate) {
  __mmask16 mask[NV];  // the vectors' columns: the last's masked by last
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) mask[v] = v == NV - 1 ? last : static_cast<__mmask16>(0xFFFF);
  __m512 s[MR][NV];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  for (int t = 0; t < k; ++t) {
    typename Step::Vector bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = Step::b(b + t * ldb + 16 * v, mask[v]);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const typename Step::Vector av = Step::a(a[r * a_row + t * a_k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) s[r][v] = Step::madd(s[r][v], av, bv[v]);
    }
  }
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* c = C + r * ldc + 16 * v;
      const __m512 x =
          accumulate ? _mm512_add_ps(s[r][v], _mm512_maskz_loadu_ps(mask[v], c)) : s[r][v];
      _mm512_mask_storeu_ps(c, mask[v], x);
    }
}

// The m rows in blocks of MR, the last m % MR through tile_block<Step, m % MR, NV>.
template <class Step, int NV, int MR>
void tile_rows(int m, const typename Step::Word* a, size_t a_row, size_t a_k,
               const typename Step::Word* b, size_t ldb, int k, float* C, size_t ldc,
               __mmask16 last, bool accumulate) {
  int r = 0;
  for (; r + MR <= m; r += MR)
    tile_block<Step, MR, NV>(a + r * a_row, a_row, a_k, b, ldb, k, C + r * ldc, ldc, last,
                             accumulate);
  const int left = m - r;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((left == I + 1 ? tile_block<Step, I + 1, NV>(a + r * a_row, a_row, a_k, b, ldb, k, C + r * ldc,
                                                  ldc, last, accumulate)
                    : void()),
     ...);
  }
  (std::make_integer_sequence<int, MR - 1>{});
}

// C (m x n) (+)= A B, 64 columns (4 vectors) at a time.
template <class Step>
void tile_product(int m, int n, int k, const typename Step::Word* a, size_t a_row, size_t a_k,
                  const typename Step::Word* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  for (int j = 0; j < n; j += 64) {
    const int w = smaller(64, n - j), nv = (w + 15) / 16;
    const __mmask16 last = first(w - 16 * (nv - 1));
    switch (nv) {
      case 1:
        tile_rows<Step, 1, 12>(m, a, a_row, a_k, b + j, ldb, k, C + j, ldc, last, accumulate);
        break;
      case 2:
        tile_rows<Step, 2, 12>(m, a, a_row, a_k, b + j, ldb, k, C + j, ldc, last, accumulate);
        break;
      case 3:
        tile_rows<Step, 3, 8>(m, a, a_row, a_k, b + j, ldb, k, C + j, ldc, last, accumulate);
        break;
      default:
        tile_rows<Step, 4, 6>(m, a, a_row, a_k, b + j, ldb, k, C + j, ldc, last, accumulate);
    }
  }
}

}  // namespace
}  // namespace mpitrain::cpu
