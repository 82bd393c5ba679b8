// CPU backend: fp32 tile products on AVX2 with FMA (cpu_fp32_tiles.hpp), the same sums as the
// AVX-512 kernel's in 8-lane vectors. Compiled for AVX2 and FMA whatever the build's -march (the
// pragma below, after every include, as cpu_fp32_tiles_avx512.cpp); cpu_fp32_tiles.cpp calls it
// only where the CPU has them.
#include <immintrin.h>

#include <utility>

#include "cpu_fp32_tiles.hpp"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "cpu_tile_lanes_avx2.hpp"
#include "cpu_tile_product.hpp"

namespace mpitrain::cpu::avx2 {

namespace {

// A step of fp32 FMA: one float of A and 8 of B's row (cpu_tile_product.hpp).
struct Fp32Step {
  using Lanes = Avx2Lanes;
  using Word = float;
  using Vector = __m256;
  static Vector b(const Word* p) { return _mm256_loadu_ps(p); }
  static Vector b(const Word* p, __m256i k) { return _mm256_maskload_ps(p, k); }
  static Vector a(Word w) { return _mm256_set1_ps(w); }
  static __m256 madd(__m256 s, Vector a, Vector b) { return _mm256_fmadd_ps(a, b, s); }
};

}  // namespace

void transpose_rows(const float* X, size_t ld, int n, int K, float* out) {
  transpose_rows_of<Avx2Lanes>(n, K, out, rows_ld(n), [X, ld, K](int j, int t0) {
    return _mm256_maskload_epi32(reinterpret_cast<const int*>(X + j * ld + t0),
                                 Avx2Lanes::first(K - t0));
  });
}

void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  tile_product<Fp32Step>(m, n, K, a, a_row, a_k, b, ldb, C, ldc, accumulate);
}

}  // namespace mpitrain::cpu::avx2

#pragma GCC pop_options
