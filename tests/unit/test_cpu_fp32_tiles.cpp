// The fp32 tile products of attention (src/backend/cpu_fp32_tiles.hpp), the backend's choice and
// each kind of vectors this CPU runs (AVX2, AVX-512), against a double reference, with A read
// row-major or transposed in place and B read as rows in place or from a transpose_rows copy of
// the stored B^T; and the two kinds against each other, bit for bit.
//
// Tolerance: each element is a sum of K fp32 products by fused multiply-adds (one rounding each,
// 2^-24) from zero, then (accumulating) one add of C: |out - ref| <= K 2^-24 sum_k |a b| +
// 2^-24 |C0 + ref| (Higham's bound for a recursive sum), checked per element for any order.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "../../src/backend/cpu_fp32_tiles.hpp"
#include "../support/random_values.hpp"
#include "../support/tile_product_check.hpp"

namespace mpitrain {
namespace {

using FVec = std::vector<float>;

// One kind of vectors' kernels (cpu_fp32_tiles.hpp), and whether this CPU runs them (asked when
// a test runs: the backend's choice fixes oneDNN's ISA, which another test caps first).
struct Kernels {
  const char* name;
  bool (*runs)();
  void (*transpose_rows)(const float*, size_t, int, int, float*);
  void (*product)(int, int, int, const float*, size_t, size_t, const float*, size_t, float*, size_t,
                  bool);
};
const Kernels kAvx2{"AVX2",
                    [] { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); },
                    cpu::avx2::transpose_rows, cpu::avx2::fp32_tile_product};
const Kernels kAvx512{"AVX-512",
                      [] {
                        return __builtin_cpu_supports("avx512f") &&
                               __builtin_cpu_supports("avx512bw") &&
                               __builtin_cpu_supports("avx512vl");
                      },
                      cpu::avx512::transpose_rows, cpu::avx512::fp32_tile_product};
const Kernels kChosen{"the backend's choice", cpu::fp32_tiles, cpu::transpose_rows,
                      cpu::fp32_tile_product};

// attention's tiles (32 x 32 x 64, 32 x 64 x 32, 16-row halves, 128 for long keys), every
// remainder of the row blocks (AVX-512: 12, 8, 6 rows; AVX2: 12, 6) and of the vectors of columns
// (1..4 of 16, 1..2 of 8, a part vector, past 64), K past a transpose's 16
struct Shape {
  int m, n, K;
};
const Shape kShapes[] = {{32, 32, 64}, {32, 64, 32}, {16, 64, 16}, {1, 1, 1},
                         {13, 17, 7},  {25, 48, 33}, {7, 100, 65}, {128, 128, 128},
                         {5, 64, 2},   {31, 40, 31}, {11, 24, 9},  {128, 64, 128}};

// C (m x n, ld n + 3) = A B (+ C) on kernels k, A stored as A (m x K) or A^T, B as B (K x n) or
// B^T (n x K, then transposed by transpose_rows), each with padded rows. Returns C.
FVec product(const Kernels& k, Shape s, bool a_transposed, bool b_transposed, bool accumulate,
             bool check) {
  SCOPED_TRACE(testing::Message() << k.name << ": m " << s.m << " n " << s.n << " K " << s.K
                                  << " A^T " << a_transposed << " B^T " << b_transposed
                                  << " accumulate " << accumulate);
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
    k.transpose_rows(Bs.data(), ldb, s.n, s.K, rows.data());
    bp = rows.data();
    b_ld = cpu::rows_ld(s.n);
    for (int t = 0; t < s.K; ++t)  // a copy, zero past n
      for (int j = 0; j < cpu::rows_ld(s.n); ++j)
        EXPECT_EQ(rows[t * b_ld + j], j < s.n ? b(t, j) : 0.0f)
            << "B^T's (" << t << ", " << j << ")";
  }
  FVec C = C0;
  k.product(s.m, s.n, s.K, As.data(), a_transposed ? 1 : lda, a_transposed ? lda : 1, bp, b_ld,
            C.data(), ldc, accumulate);
  if (check) test_inputs::expect_tile_product(s.m, s.n, s.K, a, b, C0, C, ldc, accumulate, s.K, 1);
  return C;
}

// f(shape, A^T, B^T, accumulate) over every shape and layout.
template <class F>
void every_layout(F&& f) {
  for (const Shape& s : kShapes)
    for (const bool a_transposed : {false, true})
      for (const bool b_transposed : {false, true})
        for (const bool accumulate : {false, true}) f(s, a_transposed, b_transposed, accumulate);
}

TEST(CpuFp32Tiles, ProductsMatchTheDoubleProductInEveryLayout) {
  for (const Kernels* k : {&kChosen, &kAvx2, &kAvx512}) {
    if (!k->runs()) continue;
    every_layout([&](Shape s, bool ta, bool tb, bool acc) { product(*k, s, ta, tb, acc, true); });
  }
  if (!kChosen.runs())
    GTEST_SKIP() << "no AVX2 with FMA here (or ONEDNN_MAX_CPU_ISA caps it): the BLAS multiplies "
                    "attention's tiles";
}

// Each sum is taken in the same order on either kind of vectors: a run's attention has the same
// bits on an AVX2 CPU as on an AVX-512 one.
TEST(CpuFp32Tiles, Avx2AndAvx512GiveTheSameBits) {
  if (!kAvx2.runs() || !kAvx512.runs()) GTEST_SKIP() << "this CPU has no AVX-512: one kernel only";
  every_layout([](Shape s, bool ta, bool tb, bool acc) {
    const FVec c2 = product(kAvx2, s, ta, tb, acc, false);
    const FVec c512 = product(kAvx512, s, ta, tb, acc, false);
    ASSERT_EQ(0, std::memcmp(c2.data(), c512.data(), c2.size() * sizeof(float)))
        << "m " << s.m << " n " << s.n << " K " << s.K << " A^T " << ta << " B^T " << tb;
  });
}

}  // namespace
}  // namespace mpitrain
