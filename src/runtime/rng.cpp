#include "mpitrain/runtime/rng.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// splitmix64's output function: a bijective 64-bit mix.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace

Rng::Rng(uint64_t seed, uint64_t stream) {
  uint64_t x = seed ^ mix64(stream + kGolden);  // splitmix64 state for this (seed, stream)
  for (auto& word : s_) {
    x += kGolden;
    word = mix64(x);
  }
}

Rng Rng::from_state(const State& state) {
  Rng rng;
  rng.s_ = state;
  return rng;
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::normal() { return normal_pair().first; }

std::pair<double, double> Rng::normal_pair() {
  const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
  const double u2 = uniform();
  const double r = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * std::numbers::pi * u2;
  return {r * std::cos(t), r * std::sin(t)};
}

uint64_t rng_stream::param_init_stream(uint64_t tensor, uint64_t chunk) {
  if (tensor >= (1ull << 20) || chunk >= (1ull << 20))
    MPITRAIN_THROW("initial values: tensor " + std::to_string(tensor) + ", chunk " +
                   std::to_string(chunk) + " past the 2^20 of each that the streams name");
  return kParamInit + (tensor << 20) + chunk;
}

uint64_t Rng::below(uint64_t n) {
  if (n == 0) MPITRAIN_THROW("Rng::below(0)");
  const uint64_t threshold = (0 - n) % n;  // 2^64 mod n: reject the short last block
  for (;;) {
    const uint64_t r = next_u64();
    if (r >= threshold) return r % n;
  }
}

}  // namespace mpitrain
