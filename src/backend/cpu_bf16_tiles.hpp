// Private helper of the CPU backend: products of small bf16 tiles with fp32 accumulation
// (AVX512-BF16's VDPBF16PS), for attention's tiles in bf16 training (cpu_attention.cpp).
//
// VDPBF16PS multiplies pairs of bf16 along K: c[j] += a[2t] b[2t][j] + a[2t+1] b[2t+1][j], each
// product exact in fp32 (8-bit significands), the sums rounded to fp32 (denormal inputs and
// results are flushed to zero). So the operands are stored as 32-bit words, each a pair of bf16
// along K ("pairs"), the low half the even k:
//   A (m x K) as rows of pairs: word (r, t) = (A[r][2t], A[r][2t+1]) at a[r a_row + t a_pair];
//     a row-major A has a_row = k2, a_pair = 1; one packed by pack_pairs_by_rows (the transpose
//     of what is wanted) has a_row = 1, a_pair = its ld.
//   B (K x n) as rows of pair words: word (t, j) = (B[2t][j], B[2t+1][j]) at b[t ldb + j].
// A K that is odd is padded with a zero k.
//
// Every operand is packed from fp32 values rounded to bf16 (VCVTNE2PS2BF16: round to nearest
// even, denormals to zero; the trainer's values are bf16 already, so it only changes P and dS,
// the probabilities and score gradients that attention computes in fp32). Call only where oneDNN has avx512_core_bf16
// (cpu_bf16_gemms(): the CPU has AVX512-BF16 and ONEDNN_MAX_CPU_ISA does not cap it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpitrain::cpu {

// Pair words per row of the pair-rows layouts: ceil(K / 2).
inline int pair_count(int K) { return (K + 1) / 2; }
// Words per row of a pair-rows B of n columns: n rounded up to a whole vector of 16.
inline int pair_ld(int n) { return (n + 15) / 16 * 16; }

// out (m rows of k2 = pair_count(K) words) = A (m x K, ld), row-major pairs: a_row k2, a_pair 1.
void pack_pairs(const float* A, size_t ld, int m, int K, uint32_t* out);
// out (pair_count(K) rows of ldb = pair_ld(n) words) = B (K x n, ld) as pair rows; the words past
// n are zero. Also A^T as rows of pairs: A = B^T (n x K) has a_row 1, a_pair ldb.
void pack_pairs_by_rows(const float* B, size_t ld, int K, int n, uint32_t* out);
// out (pair_count(K) rows of ldb = pair_ld(n) words) = B^T as pair rows, B^T (K x n) stored as
// X (n x K, ld): the pairs run along X's rows.
void pack_pairs_transposed(const float* X, size_t ld, int n, int K, uint32_t* out);

// C (m x n, ldc; fp32) = A B, or C += A B where accumulate; A, B as above with k2 pair words.
void bf16_tile_product(int m, int n, int k2, const uint32_t* a, size_t a_row, size_t a_pair,
                       const uint32_t* b, size_t ldb, float* C, size_t ldc, bool accumulate);

}  // namespace mpitrain::cpu
