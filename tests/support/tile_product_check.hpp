// The check of attention's tile products (test_cpu_fp32_tiles.cpp, test_cpu_bf16_tiles.cpp):
// C (m x n, ldc) against C0 + A B (or A B) in double, elementwise, within Higham's bound for a
// recursive fp32 sum, and the padding of C's rows past n unwritten.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

namespace mpitrain::test_inputs {

// a(r, k), b(k, j): the operands as the kernel multiplies them (rounded where it rounds them).
// The bound: |C - ref| <= sum_rounds 2^-24 sum_k |a b| + c_rounds 2^-24 |C0 + ref|.
template <class A, class B>
void expect_tile_product(int m, int n, int K, A&& a, B&& b, const std::vector<float>& C0,
                         const std::vector<float>& C, size_t ldc, bool accumulate,
                         double sum_rounds, double c_rounds) {
  const double u = std::ldexp(1.0, -24);
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; ++k) {
        ref += double(a(r, k)) * b(k, j);
        mag += std::fabs(double(a(r, k)) * b(k, j));
      }
      const double c0 = accumulate ? C0[r * ldc + j] : 0.0;
      const double tol = sum_rounds * u * mag + c_rounds * u * std::fabs(c0 + ref);
      ASSERT_NEAR(C[r * ldc + j], c0 + ref, tol) << "at (" << r << ", " << j << ")";
    }
    for (size_t j = n; j < ldc; ++j)  // the padding of C's rows is not written
      ASSERT_EQ(C[r * ldc + j], C0[r * ldc + j]) << "padding (" << r << ", " << j << ")";
  }
}

}  // namespace mpitrain::test_inputs
