// Helpers of the CPU backend tests (test_cpu_*.cpp): random vectors and finite differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mpitrain/backend/backend.hpp"

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

// The vocabulary-parallel cross-entropy of backend.hpp on tp simulated tensor-parallel ranks:
// logits(N, Vp) (Vp divisible by tp) is split into tp column shards of Vp/tp columns, and the
// all-reduces between the phases are done here (MAX over row_max, SUM over stats, in rank
// order). Writes every rank's losses (tp x N) and, if dloss != 0, the concatenated gradient back
// into logits; returns every rank's total (they must agree). tp = 1 is the plain single-rank call.
template <typename T>
std::vector<double> ce_tensor_parallel(Backend<T>& be, std::vector<T>& logits,
                                       const std::vector<int32_t>& targets,
                                       std::vector<std::vector<T>>& losses, int N, int V, int Vp,
                                       int tp, T dloss) {
  const int Vl = Vp / tp;
  EXPECT_EQ(Vl * tp, Vp) << "Vp must be divisible by tp";
  std::vector<std::vector<T>> shard(tp, std::vector<T>(static_cast<size_t>(N) * Vl));
  for (int r = 0; r < tp; ++r)
    for (int n = 0; n < N; ++n)
      std::copy_n(logits.begin() + static_cast<size_t>(n) * Vp + r * Vl, Vl,
                  shard[r].begin() + static_cast<size_t>(n) * Vl);
  std::vector<std::vector<T>> row_max(tp, std::vector<T>(N)), stats(tp, std::vector<T>(2 * N));
  for (int r = 0; r < tp; ++r) be.ce_row_max(shard[r].data(), row_max[r].data(), N, Vl, r * Vl, V);
  std::vector<T> max_all(N, -std::numeric_limits<T>::infinity());
  for (int r = 0; r < tp; ++r)
    for (int n = 0; n < N; ++n) max_all[n] = std::max(max_all[n], row_max[r][n]);
  for (int r = 0; r < tp; ++r)
    be.ce_stats(shard[r].data(), max_all.data(), targets.data(), stats[r].data(), N, Vl, r * Vl, V);
  std::vector<T> stats_all(2 * N, T(0));
  for (int r = 0; r < tp; ++r)
    for (int i = 0; i < 2 * N; ++i) stats_all[i] += stats[r][i];
  std::vector<double> totals(tp);
  losses.assign(tp, std::vector<T>(N));
  for (int r = 0; r < tp; ++r)
    totals[r] = be.ce_loss(shard[r].data(), max_all.data(), stats_all.data(), targets.data(),
                           losses[r].data(), N, Vl, r * Vl, V, dloss);
  for (int r = 0; r < tp; ++r)
    for (int n = 0; n < N; ++n)
      std::copy_n(shard[r].begin() + static_cast<size_t>(n) * Vl, Vl,
                  logits.begin() + static_cast<size_t>(n) * Vp + r * Vl);
  return totals;
}

}  // namespace mpitrain::testing
