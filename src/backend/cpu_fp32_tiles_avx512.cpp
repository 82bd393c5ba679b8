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

void transpose_rows(const float* X, size_t ld, int n, int K, float* out) {
  transpose_floats<Avx512Lanes>(X, ld, n, K, out, rows_ld(n));
}

void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate) {
  tile_product<Fp32Step<Avx512Lanes>>(m, n, K, a, a_row, a_k, b, ldb, C, ldc, accumulate);
}

}  // namespace mpitrain::cpu::avx512

#pragma GCC pop_options
