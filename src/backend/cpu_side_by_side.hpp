// Private to the CPU backend: small fp32 products run side by side on the threads.
//
// One library call splits a product over the threads, which pays fully only for large ones. So a
// product of at most kSideBySideFlops, on more than one thread, is cut into `threads` blocks of
// rows (multiples of 16, the kernels' row tile), one library call per block on the calling thread
// (either library runs single-threaded inside a parallel region: cpu_gemm.cpp), and the
// backward's two products run at once. The blocks of a product depend only on its rows and the
// thread count, so the fp32 path (cpu_matmul.cpp) and the blocked sgemm's one-tile products
// (cpu_blocked_gemm.cpp: the bf16 fall-back, fp16) cut alike and give the same bits.
//
// Tiny GPT-2 (L4 C128 T64 B4), 2 threads, AMD EPYC Zen 5, mean ms/step: on a quiet host 5.60 ->
// 5.52 (3 interleaved rounds; 1 thread 9.5: 1.72x); with the host taking part of the second CPU,
// --profile-ops, the backward's products 4.4 -> 3.35 ms, the step 10.0 -> 8.9. GPT-2 small's
// smallest product is 1.2 GFLOP: it stays with the library (on many threads each block would
// repack the whole weight).
#pragma once

#include <algorithm>
#include <initializer_list>
#include <vector>

#include "cpu_kernels.hpp"

namespace mpitrain::cpu {

inline constexpr double kSideBySideFlops = double(1 << 28);

// C(M,N) (ld ldc) = op(A)(M,K) op(B)(K,N) (+ C), T throughout, row-major; A stored (K,M) when
// ta, else (M,K), rows lda apart; B stored (N,K) when tb, else (K,N), rows ldb apart.
template <typename T>
struct RowProduct {
  bool ta, tb;
  int M, N, K;
  const T* A;
  int lda;
  const T* B;
  int ldb;
  bool accumulate;
  T* C;
  int ldc;
  double flops() const { return 2.0 * M * N * K; }
  // rows [m0, m1) of C: one library call
  void rows(int m0, int m1) const {
    const T* a = ta ? A + m0 : A + static_cast<size_t>(m0) * lda;
    gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m1 - m0, N, K, T(1), a,
         lda, B, ldb, accumulate ? T(1) : T(0), C + static_cast<size_t>(m0) * ldc, ldc);
  }
};

// Whether products of this size run side by side on `threads` threads.
inline bool side_by_side_pays(double flops, int threads) {
  return threads > 1 && flops <= kSideBySideFlops;
}

// The products at once, each in `threads` blocks of rows; a thread takes every threads-th block
// (with two products of equal rows: one block of each).
template <typename T>
void side_by_side(std::initializer_list<RowProduct<T>> products, int threads) {
  struct Block {
    const RowProduct<T>* product;
    int m0, m1;
  };
  std::vector<Block> blocks;
  for (const RowProduct<T>& p : products) {
    const int rows = ((p.M + threads - 1) / threads + 15) / 16 * 16;
    for (int m0 = 0; m0 < p.M; m0 += rows) blocks.push_back({&p, m0, std::min(p.M, m0 + rows)});
  }
#pragma omp parallel for schedule(static, 1)
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i].product->rows(blocks[i].m0, blocks[i].m1);
}

}  // namespace mpitrain::cpu
