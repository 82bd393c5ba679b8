// CPU backend: fp32 tile products on AVX-512 (cpu_fp32_tiles.hpp). This file is compiled for
// AVX-512 whatever the build's -march (the pragma below, after every include, so that no inline
// function of a header is emitted here with those instructions); cpu_fp32_tiles.cpp calls it only
// where the CPU has them. Everything but the entry points is in an unnamed namespace, and no std::
// template is instantiated here, for the same reason.
#include <immintrin.h>

#include <utility>

#include "cpu_fp32_tiles.hpp"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl")

#include "cpu_tile_lanes_avx512.hpp"
#include "cpu_tile_product.hpp"

namespace mpitrain::cpu::avx512 {

namespace {

// A step of fp32 FMA: one float of A and 16 of B's row (cpu_tile_product.hpp).
struct Fp32Step {
  using Lanes = Avx512Lanes;
  using Word = float;
  using Vector = __m512;
  static Vector b(const Word* p) { return _mm512_loadu_ps(p); }
  static Vector b(const Word* p, __mmask16 k) { return _mm512_maskz_loadu_ps(k, p); }
  static Vector a(Word w) { return _mm512_set1_ps(w); }
  static __m512 madd(__m512 s, Vector a, Vector b) { return _mm512_fmadd_ps(a, b, s); }
};

}  // namespace

void transpose_rows(const float* X, size_t ld, int n, int K, float* out) {
  transpose_rows_of<Avx512Lanes>(n, K, out, rows_ld(n), [X, ld, K](int j, int t0) {
    return _mm512_maskz_loadu_epi32(Avx512Lanes::first(K - t0), X + j * ld + t0);
  });
}

void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  tile_product<Fp32Step>(m, n, K, a, a_row, a_k, b, ldb, C, ldc, accumulate);
}

}  // namespace mpitrain::cpu::avx512

#pragma GCC pop_options
