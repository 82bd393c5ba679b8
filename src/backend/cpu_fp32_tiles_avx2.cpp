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

void transpose_rows(const float* X, size_t ld, int n, int K, float* out) {
  transpose_floats<Avx2Lanes>(X, ld, n, K, out, rows_ld(n));
}

void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  tile_product<Fp32Step<Avx2Lanes>>(m, n, K, a, a_row, a_k, b, ldb, C, ldc, accumulate);
}

}  // namespace mpitrain::cpu::avx2

#pragma GCC pop_options
