// Private helper of the CPU backend: products of small fp32 tiles on AVX-512 FMA, for attention's
// tiles in fp32 (and fp16, widened) training (cpu_attention.cpp), where OpenBLAS's sgemm spends
// much of each call on its entry and packing at these sizes (32 x 32 x 64: 150 GFLOP/s a thread
// against its 200 on large products; this kernel 220-225, AMD EPYC Zen 5).
//
// A (m x K) is read in place with two strides: element (r, k) at a[r a_row + k a_k] (row-major:
// a_row its ld, a_k 1; stored transposed: a_row 1, a_k its ld). B (K x n) is read in place as
// rows: element (k, j) at b[k ldb + j], the n columns contiguous. A B^T stored as rows (k's and
// v's heads) is first transposed into such rows by transpose_rows. Each element of C is the
// fp32 sum of its K products in k order, fused multiply-adds from zero, and then (where
// accumulating) added to C once.
//
// Call only where oneDNN has avx512_core (cpu_fp32_tiles(): the CPU has AVX-512 and
// ONEDNN_MAX_CPU_ISA does not cap it below).
#pragma once

#include <cstddef>

namespace mpitrain::cpu {

// Whether the fp32 tiles can run here.
bool fp32_tiles();

// Floats per row of transpose_rows's output for n columns: n rounded up to a whole vector of 16.
inline int rows_ld(int n) { return (n + 15) / 16 * 16; }

// out (K rows of rows_ld(n) floats) = X^T, X (n x K, ld) stored as rows; the floats past n zero.
void transpose_rows(const float* X, size_t ld, int n, int K, float* out);

// C (m x n, ldc) = A B, or C += A B where accumulate; A and B as above.
void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate);

}  // namespace mpitrain::cpu
