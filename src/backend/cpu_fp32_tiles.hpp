// Private helper of the CPU backend: products of small fp32 tiles on FMA vectors, for attention's
// tiles in fp32 (and fp16, widened) training (cpu_attention.cpp), where OpenBLAS's sgemm spends
// much of each call on its entry and packing at these sizes. One thread, 32 x 32 x 64: on AMD
// EPYC Zen 5 (AVX-512) 220-225 GFLOP/s against OpenBLAS SkylakeX's 150; on AMD EPYC Zen 3 (AVX2)
// see bench/README.md ("attention").
//
// A (m x K) is read in place with two strides: element (r, k) at a[r a_row + k a_k] (row-major:
// a_row its ld, a_k 1; stored transposed: a_row 1, a_k its ld). B (K x n) is read in place as
// rows: element (k, j) at b[k ldb + j], the n columns contiguous. A B^T stored as rows (k's and
// v's heads) is first transposed into such rows by transpose_rows. Each element of C is the
// fp32 sum of its K products in k order, fused multiply-adds from zero, and then (where
// accumulating) added to C once: the same bits on AVX-512 and on AVX2.
#pragma once

#include <cstddef>

namespace mpitrain::cpu {

// The vectors the tiles run on: AVX-512 where oneDNN has avx512_core, else AVX2 where oneDNN has
// avx2 and the CPU FMA (ONEDNN_MAX_CPU_ISA caps both), else none (the BLAS multiplies the
// tiles). Decided once, at the first call.
enum class Fp32TileIsa { None, Avx2, Avx512 };
Fp32TileIsa fp32_tile_isa();
inline bool fp32_tiles() { return fp32_tile_isa() != Fp32TileIsa::None; }

// Floats per row of transpose_rows's output for n columns: n rounded up to a whole 16 floats.
inline int rows_ld(int n) { return (n + 15) / 16 * 16; }

// out (K rows of rows_ld(n) floats) = X^T, X (n x K, ld) stored as rows; the floats past n zero.
void transpose_rows(const float* X, size_t ld, int n, int K, float* out);

// C (m x n, ldc) = A B, or C += A B where accumulate; A and B as above.
void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate);

// The two above on one kind of vectors (the tests compare them); the CPU must have it.
namespace avx512 {
void transpose_rows(const float* X, size_t ld, int n, int K, float* out);
void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate);
}  // namespace avx512
namespace avx2 {
void transpose_rows(const float* X, size_t ld, int n, int K, float* out);
void fp32_tile_product(int m, int n, int K, const float* a, size_t a_row, size_t a_k,
                       const float* b, size_t ldb, float* C, size_t ldc, bool accumulate);
}  // namespace avx2

}  // namespace mpitrain::cpu
