// The project's deterministic random numbers: the same sequence on every compiler and platform.
//
// xoshiro256** (Blackman & Vigna), its state filled by splitmix64 from (seed, stream), so that
// independent streams — one per chunk of a parameter tensor, one per data epoch — come from one
// seed. Integers and uniform() are bit-exact everywhere; normal() and normal_pair() are our own
// Box–Muller (std:: distributions are implementation-defined) and use std::log, std::cos and
// std::sin, whose last bit is the C library's (glibc gives the same on every x86-64/aarch64 host).
#pragma once

#include <array>
#include <cstdint>
#include <utility>

namespace mpitrain {

// Stream numbers by purpose, so that no two uses of one seed draw from the same stream.
namespace rng_stream {
inline constexpr uint64_t kDataOrder = 0;             // + epoch: the per-epoch sample permutation
inline constexpr uint64_t kParamInit = 1ull << 40;    // + param_init_stream(): initial parameter values
inline constexpr uint64_t kSampling = 2ull << 40;     // text generation
// + (component << 32) + epoch: blend component c >= 1's permutations (0 uses kDataOrder)
inline constexpr uint64_t kBlendOrder = 3ull << 40;
// Initial values: tensor `tensor`'s chunk `chunk` of kInitChunk values (param_init_stream); both
// below 2^20, so that a tensor of up to 2^36 values stays inside kParamInit's range.
inline constexpr uint64_t kInitChunk = 1ull << 16;
uint64_t param_init_stream(uint64_t tensor, uint64_t chunk);  // kParamInit + (tensor << 20) + chunk
}  // namespace rng_stream

class Rng {
 public:
  using State = std::array<uint64_t, 4>;

  Rng(uint64_t seed, uint64_t stream);
  static Rng from_state(const State& state);  // resume from state() (e.g. from a checkpoint)

  uint64_t next_u64();
  double uniform();            // [0, 1), 53 random bits
  double normal();             // standard normal: normal_pair().first (no cached spare)
  // Two independent standard normals from two uniforms u1, u2 (Box–Muller: r cos t and r sin t,
  // r = sqrt(-2 log(1 - u1)), t = 2 pi u2): both values for one log and one sqrt.
  std::pair<double, double> normal_pair();
  uint64_t below(uint64_t n);  // uniform in [0, n), unbiased (rejection); n > 0

  const State& state() const { return s_; }

 private:
  Rng() = default;
  State s_{};
};

}  // namespace mpitrain
