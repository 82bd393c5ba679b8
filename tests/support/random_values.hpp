// Reproducible random test inputs, the same bits on every platform for a seed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mpitrain::test_inputs {

// n values uniform in [lo, hi) (never all zeros: they hide unwritten outputs and wrong indexing).
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f,
                                        float hi = 1.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace mpitrain::test_inputs
