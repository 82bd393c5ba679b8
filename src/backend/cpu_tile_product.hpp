// Private helper of the CPU backend's attention tiles (cpu_bf16_tiles.cpp, cpu_fp32_tiles_*.cpp):
// the register-blocked product C (m x n, fp32; ldc) = A B, or C += A B where accumulate, over k
// steps of what a Step multiplies, on the vectors of a Lanes:
//   Step::Lanes      the vector registers (cpu_tile_lanes_avx512.hpp, cpu_tile_lanes_avx2.hpp)
//   Step::Word       the element of A and B a step reads (a float, or a pair of bf16)
//   Step::Vector     Lanes::kCount of B's words, as the multiply takes them
//   Step::b(p)       B's Lanes::kCount words at p
//   Step::b(p, k)    those of the mask k, the others zero
//   Step::a(w)       A's word w broadcast to a Vector
//   Step::madd(s, a, b)   s + a b, Lanes::kCount fp32 sums
// (Fp32Step<Lanes>, below, is the fp32 tiles' step; the bf16 tiles' is their file's own.)
// A word (r, t) is a[r a_row + t a_k] (a row-major A: a_row its ld, a_k 1; an A stored transposed:
// a_row 1, a_k its ld); B word (t, j) is b[t ldb + j].
//
// Blocks of MR rows x NV vectors keep their MR x NV sums in registers (Lanes::rows(NV) of them
// fit beside the NV vectors of B and A's broadcast): at each step NV vectors of B are loaded, each
// of the MR rows' word of A broadcast, and MR x NV multiplies issued. Each sum starts from zero and
// takes its K products in k order, so every Lanes gives the same bits. This header is included
// by those files after their target pragma (and after every header they include), so that each
// compiles it for its own instructions (they include <immintrin.h> and <utility> before it);
// everything is in an unnamed namespace, so no copy is shared between them.
#pragma once

namespace mpitrain::cpu {
namespace {

int smaller(int a, int b) { return a < b ? a : b; }

// out (k rows of ldo words; ldo a multiple of Lanes::kCount) = the transpose of n rows of k 32-bit
// words, words(j, t0) giving the kCount words from t0 of row j (zero past k); the words past n
// zero.
template <class Lanes, typename W, class Words>
void transpose_rows_of(int n, int k, W* out, int ldo, Words&& words) {
  constexpr int L = Lanes::kCount;
  for (int j0 = 0; j0 < ldo; j0 += L)
    for (int t0 = 0; t0 < k; t0 += L) {
      typename Lanes::Words r[L];  // r[i]: words t0.. of row j0 + i
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i) r[i] = j0 + i < n ? words(j0 + i, t0) : Lanes::zero_words();
      Lanes::transpose(r);  // r[i]: word t0 + i of the rows j0..
#pragma GCC unroll 16
      for (int i = 0; i < L; ++i)
        if (t0 + i < k) Lanes::store_words(out + static_cast<size_t>(t0 + i) * ldo + j0, r[i]);
    }
}

// C (MR x NV vectors) (+)= A B over k steps; where kMasked, the last vector's columns are those
// of the mask last (the others are whole vectors: no mask to hold in a register).
template <class Step, int MR, int NV, bool kMasked>
void tile_block(const typename Step::Word* a, size_t a_row, size_t a_k,
                const typename Step::Word* b, size_t ldb, int k, float* C, size_t ldc,
                typename Step::Lanes::Mask last, bool accumulate) {
  using Lanes = typename Step::Lanes;
  constexpr int L = Lanes::kCount;
  typename Lanes::Sums s[MR][NV];
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) s[r][v] = Lanes::zero();
  for (int t = 0; t < k; ++t) {
    typename Step::Vector bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const typename Step::Word* p = b + t * ldb + L * v;
      bv[v] = kMasked && v == NV - 1 ? Step::b(p, last) : Step::b(p);
    }
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
      float* c = C + r * ldc + L * v;
      if (kMasked && v == NV - 1)
        Lanes::store(c, last, accumulate ? Lanes::add(s[r][v], Lanes::load(c, last)) : s[r][v]);
      else
        Lanes::store(c, accumulate ? Lanes::add(s[r][v], Lanes::load(c)) : s[r][v]);
    }
}

// The m rows in blocks of MR = Lanes::rows(NV), the last m % MR through tile_block<m % MR>.
template <class Step, int NV, bool kMasked>
void tile_rows(int m, const typename Step::Word* a, size_t a_row, size_t a_k,
               const typename Step::Word* b, size_t ldb, int k, float* C, size_t ldc,
               typename Step::Lanes::Mask last, bool accumulate) {
  constexpr int MR = Step::Lanes::rows(NV);
  int r = 0;
  for (; r + MR <= m; r += MR)
    tile_block<Step, MR, NV, kMasked>(a + r * a_row, a_row, a_k, b, ldb, k, C + r * ldc, ldc, last,
                                      accumulate);
  const int left = m - r;
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((left == I + 1 ? tile_block<Step, I + 1, NV, kMasked>(a + r * a_row, a_row, a_k, b, ldb, k,
                                                           C + r * ldc, ldc, last, accumulate)
                    : void()),
     ...);
  }
  (std::make_integer_sequence<int, MR - 1>{});
}

// C (m x n) (+)= A B, Lanes::kVectors vectors of columns at a time; the last vector of the last
// columns masked where n is not a whole number of vectors.
template <class Step>
void tile_product(int m, int n, int k, const typename Step::Word* a, size_t a_row, size_t a_k,
                  const typename Step::Word* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  using Lanes = typename Step::Lanes;
  constexpr int L = Lanes::kCount, width = L * Lanes::kVectors;
  for (int j = 0; j < n; j += width) {
    const int w = smaller(width, n - j), nv = (w + L - 1) / L;
    const typename Lanes::Mask last = Lanes::first(w - L * (nv - 1));
    const bool masked = w % L != 0;
    [&]<int... V>(std::integer_sequence<int, V...>) {
      ((nv == V + 1 ? (masked ? tile_rows<Step, V + 1, true>(m, a, a_row, a_k, b + j, ldb, k, C + j,
                                                             ldc, last, accumulate)
                              : tile_rows<Step, V + 1, false>(m, a, a_row, a_k, b + j, ldb, k,
                                                              C + j, ldc, last, accumulate))
                    : void()),
       ...);
    }
    (std::make_integer_sequence<int, Lanes::kVectors>{});
  }
}

// A step of fp32 FMA on Lanes: one float of A and Lanes::kCount of B's row (the fp32 tiles,
// cpu_fp32_tiles_*.cpp).
template <class L>
struct Fp32Step {
  using Lanes = L;
  using Word = float;
  using Vector = typename L::Sums;
  static Vector b(const float* p) { return L::load(p); }
  static Vector b(const float* p, typename L::Mask k) { return L::load(p, k); }
  static Vector a(float w) { return L::broadcast(w); }
  static Vector madd(Vector s, Vector a, Vector b) { return L::fma(a, b, s); }
};

// out (K rows of ldo floats) = X^T, X (n x K, ld) stored as rows; the floats past n zero.
template <class L>
void transpose_floats(const float* X, size_t ld, int n, int K, float* out, int ldo) {
  transpose_rows_of<L>(n, K, out, ldo, [X, ld, K](int j, int t0) {
    return L::load_words(X + j * ld + t0, L::first(K - t0));
  });
}

}  // namespace
}  // namespace mpitrain::cpu
