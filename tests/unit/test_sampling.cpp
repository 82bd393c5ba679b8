// The sample's token choice: temperature, then top-k, then top-p (nucleus) on the tempered
// distribution (Hugging Face's order), on hand-made logits
// against a double-precision reference; greedy at temperature 0 and top-k 1; the draws a seed
// gives are the same every time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "mpitrain/runtime/rng.hpp"
#include "mpitrain/train/generate.hpp"

using mpitrain::Rng;
using mpitrain::SamplingConfig;

namespace {

// Ids 0..7; 1 and 4 tie for the top (ties rank the lower id first).
const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 0.5f, 3.0f, -1.0f, 2.5f, 0.0f};

// The reference: every id ranked by (logit desc, id asc), the first k, then the fewest of those
// whose tempered softmax over the k reaches p, each weighted exp((logit - max) / temperature).
std::vector<double> reference(const SamplingConfig& c) {
  const int V = static_cast<int>(kLogits.size());
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [](int a, int b) { return kLogits[a] > kLogits[b]; });
  ids.resize(c.top_k > 0 ? c.top_k : V);
  double z = 0;
  for (int id : ids) z += std::exp((static_cast<double>(kLogits[id]) - 3.0) / c.temperature);
  size_t n = 0;
  for (double mass = 0; n < ids.size() && mass < c.top_p; ++n)
    mass += std::exp((static_cast<double>(kLogits[ids[n]]) - 3.0) / c.temperature) / z;
  std::vector<double> w(V, 0.0);
  for (size_t i = 0; i < n; ++i)
    w[ids[i]] = std::exp((static_cast<double>(kLogits[ids[i]]) - 3.0) / c.temperature);
  return w;
}

std::vector<double> weights(const SamplingConfig& c) {
  std::vector<double> w;
  mpitrain::sampling_weights(kLogits.data(), static_cast<int>(kLogits.size()), c, w);
  return w;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)  // float logits, double sums: 1e-12 is ample
    EXPECT_NEAR(got[i], want[i], 1e-12 * std::max(1.0, want[i])) << "id " << i;
}

std::vector<int> draws(const SamplingConfig& c, uint64_t seed, int n) {
  Rng rng(seed, mpitrain::rng_stream::kSampling);
  std::vector<double> scratch;
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    out.push_back(
        mpitrain::sample_token(kLogits.data(), static_cast<int>(kLogits.size()), c, rng, scratch));
  return out;
}

}  // namespace

TEST(Sampling, UnfilteredWeightsAreTheTemperedSoftmax) {
  const SamplingConfig c{0.7, 0, 1.0};
  expect_near_all(weights(c), reference(c));
  for (double w : weights(c)) EXPECT_GT(w, 0.0);
}

TEST(Sampling, TopKKeepsTheKMostLikelyLowerIdFirstOnTies) {
  const SamplingConfig c{1.0, 3, 1.0};
  const std::vector<double> w = weights(c);
  expect_near_all(w, reference(c));
  const std::vector<int> kept = {1, 4, 6};
  for (int v = 0; v < 8; ++v)
    EXPECT_EQ(w[v] > 0, std::count(kept.begin(), kept.end(), v) == 1) << "id " << v;
  EXPECT_GT(weights({1.0, 1, 1.0})[1], 0.0);  // the tie at the top: id 1, not 4
  EXPECT_EQ(weights({1.0, 1, 1.0})[4], 0.0);
}

TEST(Sampling, TopPKeepsTheSmallestNucleus) {
  // softmax over all 8: 1 and 4 hold 0.285 each, 6 0.173: 0.5 needs two ids, 0.6 three.
  for (double p : {0.2, 0.5, 0.6, 0.9, 0.999}) {
    const SamplingConfig c{1.3, 0, p};
    expect_near_all(weights(c), reference(c));
  }
  const std::vector<double> half = weights({1.0, 0, 0.5});
  EXPECT_EQ(std::count_if(half.begin(), half.end(), [](double w) { return w > 0; }), 2);
}

TEST(Sampling, TopPCutsTheTemperedDistribution) {
  // At temperature 0.25 ids 1 and 4 hold 0.464 each of the tempered softmax: p = 0.9 keeps
  // those two; the untempered one (0.307 each, then 6: 0.186, 2: 0.113) would need four.
  const std::vector<double> w = weights({0.25, 0, 0.9});
  EXPECT_EQ(std::count_if(w.begin(), w.end(), [](double x) { return x > 0; }), 2);
  expect_near_all(w, reference({0.25, 0, 0.9}));
}

TEST(Sampling, TopPAppliesToTheTopKSurvivors) {
  const SamplingConfig c{0.9, 4, 0.8};
  expect_near_all(weights(c), reference(c));
}

TEST(Sampling, GreedyAtTemperatureZeroAndTopKOne) {
  for (int v : draws({0.0, 0, 1.0}, 7, 20)) EXPECT_EQ(v, 1);
  for (int v : draws({2.0, 1, 1.0}, 7, 20)) EXPECT_EQ(v, 1);
}

TEST(Sampling, DrawsFollowTheWeightsAndRepeatFromTheSeed) {
  const SamplingConfig c{1.0, 3, 1.0};
  const std::vector<int> a = draws(c, 42, 4000), b = draws(c, 42, 4000);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, draws(c, 43, 4000));
  const std::vector<double> w = reference(c);
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  for (int v = 0; v < 8; ++v) {  // 4000 draws: a binomial's sd is below 0.008; allow 0.03
    const double share = static_cast<double>(std::count(a.begin(), a.end(), v)) / a.size();
    EXPECT_NEAR(share, w[v] / total, 0.03) << "id " << v;
  }
}
