// The fp32 tile products of attention (src/backend/cpu_fp32_tiles.hpp) against a double
// reference, with A read row-major or transposed in place and B read as rows in place or from a
// transpose_rows copy of the stored B^T.
//
// Tolerance: each element is a sum of K fp32 products by fused multiply-adds (one rounding each,
// 2^-24) from zero, then (accumulating) one add of C: |out - ref| <= K 2^-24 sum_k |a b| +
// 2^-24 |C0 + ref| (Higham's bound for a recursive sum), checked per element for any order.
#include <gtest/gtest.h>

#include <vector>

#include "../../src/backend/cpu_fp32_tiles.hpp"
#include "../support/random_values.hpp"
#include "../support/tile_product_check.hpp"

namespace mpitrain {
namespace {

using FVec = std::vector<float>;

struct Shape {
  int m, n, K;
};

// C (m x n, ld n + 3) = A B (+ C), A stored as A (m x K) or A^T, B as B (K x n) or B^T (n x K,
// then transposed by transpose_rows), each with padded rows.
void check(Shape s, bool a_transposed, bool b_transposed, bool accumulate) {
  SCOPED_TRACE(testing::Message() << "m " << s.m << " n " << s.n << " K " << s.K << " A^T "
                                  << a_transposed << " B^T " << b_transposed << " accumulate "
                                  << accumulate);
  const size_t lda = (a_transposed ? s.m : s.K) + 5, ldb = (b_transposed ? s.K : s.n) + 7;
  const size_t ldc = s.n + 3;
  const FVec As = test_inputs::random_floats((a_transposed ? s.K : s.m) * lda, 1, -2, 2);
  const FVec Bs = test_inputs::random_floats((b_transposed ? s.n : s.K) * ldb, 2, -2, 2);
  const FVec C0 = test_inputs::random_floats(s.m * ldc, 3, -2, 2);
  const auto a = [&](int r, int k) { return a_transposed ? As[k * lda + r] : As[r * lda + k]; };
  const auto b = [&](int k, int j) { return b_transposed ? Bs[j * ldb + k] : Bs[k * ldb + j]; };

  const float* bp = Bs.data();
  size_t b_ld = ldb;
  FVec rows(size_t(s.K) * cpu::rows_ld(s.n), -1.0f);
  if (b_transposed) {
    cpu::transpose_rows(Bs.data(), ldb, s.n, s.K, rows.data());
    bp = rows.data();
    b_ld = cpu::rows_ld(s.n);
    for (int k = 0; k < s.K; ++k)  // a copy, zero past n
      for (int j = 0; j < cpu::rows_ld(s.n); ++j)
        ASSERT_EQ(rows[k * b_ld + j], j < s.n ? b(k, j) : 0.0f)
            << "B^T's (" << k << ", " << j << ")";
  }
  FVec C = C0;
  cpu::fp32_tile_product(s.m, s.n, s.K, As.data(), a_transposed ? 1 : lda, a_transposed ? lda : 1,
                         bp, b_ld, C.data(), ldc, accumulate);
  test_inputs::expect_tile_product(s.m, s.n, s.K, a, b, C0, C, ldc, accumulate, s.K, 1);
}

TEST(CpuFp32Tiles, ProductsMatchTheDoubleProductInEveryLayout) {
  if (!cpu::fp32_tiles())
    GTEST_SKIP()
        << "no AVX-512 here (or ONEDNN_MAX_CPU_ISA caps it): the BLAS multiplies attention's tiles";
  // attention's tiles (32 x 32 x 64, 32 x 64 x 32, 16-row halves), every remainder of the row
  // blocks (MR 12, 8, 6) and column vectors (1..4 and past 64), K past a transpose's 16
  const Shape shapes[] = {{32, 32, 64}, {32, 64, 32}, {16, 64, 16},    {1, 1, 1},  {13, 17, 7},
                          {25, 48, 33}, {7, 100, 65}, {128, 128, 128}, {5, 64, 2}, {31, 40, 31}};
  for (const Shape& s : shapes)
    for (const bool a_transposed : {false, true})
      for (const bool b_transposed : {false, true})
        for (const bool accumulate : {false, true})
          check(s, a_transposed, b_transposed, accumulate);
}

}  // namespace
}  // namespace mpitrain
