// The project's deterministic random numbers: the same sequence on every compiler and platform.
//
// xoshiro256** (Blackman & Vigna), its state filled by splitmix64 from (seed, stream), so that
// independent streams — one per parameter tensor, one per data epoch — come from one seed.
// Integers and uniform() are bit-exact everywhere; normal() is our own Box–Muller (std::
// distributions are implementation-defined) and uses std::log/std::cos, whose last bit is the
// C library's (glibc gives the same on every x86-64/aarch64 host).
#pragma once

#include <array>
#include <cstdint>

namespace mpitrain {

// Stream numbers by purpose, so that no two uses of one seed draw from the same stream.
namespace rng_stream {
inline constexpr uint64_t kDataOrder = 0;             // + epoch: the per-epoch sample permutation
inline constexpr uint64_t kParamInit = 1ull << 40;    // + tensor index: initial parameter values
inline constexpr uint64_t kSampling = 2ull << 40;     // text generation
// + (component << 32) + epoch: blend component c >= 1's permutations (0 uses kDataOrder)
inline constexpr uint64_t kBlendOrder = 3ull << 40;
}  // namespace rng_stream

class Rng {
 public:
  using State = std::array<uint64_t, 4>;

  Rng(uint64_t seed, uint64_t stream);
  static Rng from_state(const State& state);  // resume from state() (e.g. from a checkpoint)

  uint64_t next_u64();
  double uniform();            // [0, 1), 53 random bits
  double normal();             // standard normal, one per two uniforms (no cached spare)
  uint64_t below(uint64_t n);  // uniform in [0, n), unbiased (rejection); n > 0

  const State& state() const { return s_; }

 private:
  Rng() = default;
  State s_{};
};

}  // namespace mpitrain
