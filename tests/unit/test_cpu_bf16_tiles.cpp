// The bf16 tile products of attention (src/backend/cpu_bf16_tiles.hpp) against a double reference
// computed from the same operands rounded to bf16 (to_bf16_bits), in every packing the kernel
// reads: A row-major or as the transpose of a pair-rows pack, B as pair rows or transposed.
//
// Tolerance: bf16 x bf16 is exact in fp32, so the error is the fp32 sums over K terms (and the
// one add of C when accumulating): elementwise |out - ref| <= (K + 1) 2^-24 sum_k |a b| + 2^-24
// |C| (Higham's bound for a recursive sum; VDPBF16PS adds each product once). That bound is
// checked per element; it holds for any summation order the kernel takes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../../src/backend/cpu_bf16_tiles.hpp"
#include "../support/tile_product_check.hpp"
#include "mpitrain/backend/bf16_gemm_rate.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain {
namespace {

using FVec = std::vector<float>;

float bf16(float x) { return round_to(x, Precision::Bf16); }

// n values uniform in [-2, 2): rounded to bf16 where `rounded`, else fp32 (the pack rounds them).
FVec values(size_t n, uint64_t seed, bool rounded) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  FVec v(n);
  for (float& x : v) x = rounded ? bf16(dist(gen)) : dist(gen);
  return v;
}

struct Shape {
  int m, n, K;
};

// How A and B are packed: A row-major (pack_pairs) or as A^T's pair rows (pack_pairs_by_rows of
// the stored A^T); B as pair rows, or from the stored B^T (pack_pairs_transposed).
struct Layout {
  bool a_transposed, b_transposed;
};

// C (m x n, ld n + 3) = A B (+ C), checked elementwise against the double product of the
// bf16-rounded operands.
void check(Shape s, Layout l, bool accumulate, bool rounded_inputs) {
  SCOPED_TRACE(testing::Message() << "m " << s.m << " n " << s.n << " K " << s.K << " A^T "
                                  << l.a_transposed << " B^T " << l.b_transposed << " accumulate "
                                  << accumulate << " rounded " << rounded_inputs);
  const size_t lda = (l.a_transposed ? s.m : s.K) + 5, ldb = (l.b_transposed ? s.K : s.n) + 7;
  const size_t ldc = s.n + 3;
  // stored: A (m x K) or A^T (K x m); B (K x n) or B^T (n x K)
  const FVec As = values((l.a_transposed ? s.K : s.m) * lda, 1, rounded_inputs);
  const FVec Bs = values((l.b_transposed ? s.n : s.K) * ldb, 2, rounded_inputs);
  const FVec C0 = values(s.m * ldc, 3, false);
  const auto a = [&](int r, int k) {
    return bf16(l.a_transposed ? As[k * lda + r] : As[r * lda + k]);
  };
  const auto b = [&](int k, int j) {
    return bf16(l.b_transposed ? Bs[j * ldb + k] : Bs[k * ldb + j]);
  };

  const int k2 = cpu::pair_count(s.K), pldb = cpu::pair_ld(s.n);
  std::vector<uint32_t> ap(l.a_transposed ? size_t(k2) * cpu::pair_ld(s.m) : size_t(s.m) * k2);
  std::vector<uint32_t> bp(size_t(k2) * pldb);
  size_t a_row = k2, a_pair = 1;
  if (l.a_transposed) {
    cpu::pack_pairs_by_rows(As.data(), lda, s.K, s.m, ap.data());
    a_row = 1;
    a_pair = cpu::pair_ld(s.m);
  } else {
    cpu::pack_pairs(As.data(), lda, s.m, s.K, ap.data());
  }
  if (l.b_transposed)
    cpu::pack_pairs_transposed(Bs.data(), ldb, s.n, s.K, bp.data());
  else
    cpu::pack_pairs_by_rows(Bs.data(), ldb, s.K, s.n, bp.data());

  FVec C = C0;
  cpu::bf16_tile_product(s.m, s.n, k2, ap.data(), a_row, a_pair, bp.data(), pldb, C.data(), ldc,
                         accumulate);
  test_inputs::expect_tile_product(s.m, s.n, s.K, a, b, C0, C, ldc, accumulate, s.K + 1, 2);
}

TEST(CpuBf16Tiles, ProductsMatchTheDoubleProductInEveryPacking) {
  if (!cpu_bf16_gemms()) GTEST_SKIP() << "this CPU has no bf16 instructions: fp32 tiles instead";
  // attention's tiles (32 x 32 x 64, 32 x 64 x 32, 16-row halves), every remainder of the row
  // blocks (MR 12, 8, 6) and column vectors (1..4 and past 64), odd K (a zero pad)
  const Shape shapes[] = {{32, 32, 64}, {32, 64, 32}, {16, 64, 16},    {1, 1, 1},  {13, 17, 7},
                          {25, 48, 33}, {7, 100, 65}, {128, 128, 128}, {5, 64, 2}, {31, 40, 31}};
  for (const Shape& s : shapes)
    for (const Layout l : {Layout{false, false}, {false, true}, {true, false}, {true, true}})
      for (const bool accumulate : {false, true}) check(s, l, accumulate, true);
}

TEST(CpuBf16Tiles, PacksRoundFp32ToNearestBf16) {
  if (!cpu_bf16_gemms()) GTEST_SKIP() << "this CPU has no bf16 instructions: fp32 tiles instead";
  for (const Layout l : {Layout{false, false}, {false, true}, {true, false}, {true, true}})
    check({9, 21, 37}, l, false, /*rounded_inputs=*/false);
  // ties to even, checked on the words themselves: 1 + 2^-8 (a tie) rounds down to 1, and
  // 1 + 3 2^-8 (a tie) up to 1 + 2^-6
  const float x[4] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -1.0f - 0x1p-8f, 0.0f};
  uint32_t w[2];
  cpu::pack_pairs(x, 4, 1, 4, w);
  EXPECT_EQ(w[0], (uint32_t{to_bf16_bits(1.0f + 0x1p-6f)} << 16) | to_bf16_bits(1.0f));
  EXPECT_EQ(w[1], uint32_t{to_bf16_bits(-1.0f)});
}

}  // namespace
}  // namespace mpitrain
