// Helpers of the CPU backend tests (test_cpu_*.cpp): random vectors and finite differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mpitrain::testing {

inline std::vector<double> random_vec(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Central finite differences of loss() w.r.t. every x[i] against the analytic gradient ana.
// Tolerance: |num - ana| <= 1e-6 |num| + 1e-8. With eps = 1e-6 the truncation error is
// O(eps^2 f''') ~ 1e-12, and the rounding error is ~ 1e-16 |loss terms| / eps ~ 1e-10 for the
// O(1)-sized losses used here, so 1e-6 relative (plus 1e-8 absolute for gradients that are
// exactly or nearly zero) leaves two orders of margin while still catching any wrong term.
template <class Loss>
void expect_grad(const std::string& what, std::vector<double>& x, const std::vector<double>& ana,
                 Loss&& loss) {
  ASSERT_EQ(x.size(), ana.size()) << what;
  constexpr double eps = 1e-6;
  int failures = 0;
  for (size_t i = 0; i < x.size() && failures < 5; ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double lp = loss();
    x[i] = saved - eps;
    const double lm = loss();
    x[i] = saved;
    const double num = (lp - lm) / (2 * eps);
    if (std::abs(num - ana[i]) > 1e-6 * std::abs(num) + 1e-8) {
      ADD_FAILURE() << what << "[" << i << "]: analytic " << ana[i] << " numeric " << num;
      ++failures;
    }
  }
}

// max |a - b| / max |b|: the normwise relative error of a float result a against double b.
template <class A>
double rel_err(const std::vector<A>& a, const std::vector<double>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den == 0.0 ? num : num / den;
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

}  // namespace mpitrain::testing
