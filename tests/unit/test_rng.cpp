// The project RNG: pinned outputs (a change to the generator must be deliberate), streams,
// and the statistics of uniform(), below() and normal().
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/rng.hpp"

using mpitrain::Rng;

TEST(Rng, XoshiroMatchesTheReferenceImplementation) {
  // xoshiro256** from state {1, 2, 3, 4}: the first outputs of Blackman & Vigna's C code.
  Rng rng = Rng::from_state({1, 2, 3, 4});
  EXPECT_EQ(rng.next_u64(), 11520u);
  EXPECT_EQ(rng.next_u64(), 0u);
  EXPECT_EQ(rng.next_u64(), 1509978240u);
  EXPECT_EQ(rng.next_u64(), 1215971899390074240u);
}

TEST(Rng, PinnedOutputsForSeedAndStream) {
  Rng a(42, 0);
  EXPECT_EQ(a.next_u64(), 0x1ff785474f113b15u);
  EXPECT_EQ(a.next_u64(), 0x4b7867ceff5d8325u);
  EXPECT_EQ(a.next_u64(), 0x90ca7a95a9909966u);
  EXPECT_EQ(a.next_u64(), 0x9c9ea6a358c5008fu);
  Rng b(42, 1);
  EXPECT_EQ(b.next_u64(), 0x584870a53e6ddcdfu);
  EXPECT_EQ(b.next_u64(), 0x24862b58ab088c44u);
  Rng c(0, 0);
  EXPECT_EQ(c.next_u64(), 0xfb5405f7bd79c540u);
  Rng u(42, 0);
  EXPECT_EQ(u.uniform(), 0x1.ff785474f1138p-4);
  EXPECT_EQ(u.uniform(), 0x1.2de19f3bfd760p-2);
}

TEST(Rng, SameSeedAndStreamRepeatOthersDiffer) {
  Rng a(7, 3), b(7, 3), c(7, 4), d(8, 3);
  for (int i = 0; i < 100; ++i) {
    const uint64_t x = a.next_u64();
    EXPECT_EQ(x, b.next_u64());
    EXPECT_NE(x, c.next_u64());
    EXPECT_NE(x, d.next_u64());
  }
}

TEST(Rng, StateRoundTrip) {
  Rng a(5, 6);
  a.next_u64();
  Rng b = Rng::from_state(a.state());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}

TEST(Rng, UniformIsInUnitInterval) {
  Rng rng(1, 0);
  double sum = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) {
    const double u = rng.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));  // 5 standard errors
}

TEST(Rng, BelowIsInRangeAndUnbiased) {
  Rng rng(2, 0);
  EXPECT_EQ(rng.below(1), 0u);
  EXPECT_THROW(rng.below(0), mpitrain::Error);
  constexpr int kBins = 10, kDraws = 100000;
  std::array<int, kBins> hist{};
  for (int i = 0; i < kDraws; ++i) {
    const uint64_t x = rng.below(kBins);
    ASSERT_LT(x, uint64_t{kBins});
    ++hist[x];
  }
  // Chi-square with 9 degrees of freedom: P(chi2 > 33.7) < 1e-4.
  double chi2 = 0;
  for (int h : hist) chi2 += (h - kDraws / kBins) * (h - kDraws / kBins) / double(kDraws / kBins);
  EXPECT_LT(chi2, 33.7);
  // A bound near 2^64 exercises the rejection path.
  const uint64_t big = (uint64_t{1} << 63) + 12345;
  for (int i = 0; i < 1000; ++i) ASSERT_LT(rng.below(big), big);
}

TEST(Rng, NormalHasMeanZeroAndVarianceOne) {
  Rng rng(3, 0);
  const int n = 200000;
  double sum = 0, sum2 = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.normal();
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    sum2 += x * x;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  // 5 standard errors: sd(mean) = 1/sqrt(n), sd(var) = sqrt(2/n) for a standard normal.
  EXPECT_NEAR(mean, 0.0, 5 / std::sqrt(double(n)));
  EXPECT_NEAR(var, 1.0, 5 * std::sqrt(2.0 / n));
}

TEST(Rng, NormalPairIsBoxMullerOfTwoUniformsWithAnIndependentSecond) {
  Rng a(3, 0), b(3, 0);
  const double u1 = 1.0 - b.uniform(), u2 = b.uniform();
  const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * std::numbers::pi * u2;
  const auto [first, second] = a.normal_pair();
  EXPECT_EQ(first, r * std::cos(t));
  EXPECT_EQ(second, r * std::sin(t));
  const int n = 100000;
  double s1 = 0, s2 = 0, q1 = 0, q2 = 0, cross = 0;
  for (int i = 0; i < n; ++i) {
    const auto [x, y] = a.normal_pair();
    ASSERT_TRUE(std::isfinite(x) && std::isfinite(y));
    s1 += x, s2 += y, q1 += x * x, q2 += y * y, cross += x * y;
  }
  // 5 standard errors, as above; the correlation of independent normals has sd 1/sqrt(n).
  for (double sum : {s1, s2}) EXPECT_NEAR(sum / n, 0.0, 5 / std::sqrt(double(n)));
  for (double sum2 : {q1, q2}) EXPECT_NEAR(sum2 / n, 1.0, 5 * std::sqrt(2.0 / n));
  EXPECT_NEAR(cross / n, 0.0, 5 / std::sqrt(double(n)));
}
