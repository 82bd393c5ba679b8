// RoPE's frequencies, for the backends' rope ops: pair i of a head of size hs at position t turns
// by t * inv_freq(i, hs), with the model's frequency scaling applied as transformers does
// (modeling_rope_utils.py: _compute_linear_scaling_rope_parameters, _compute_llama3_parameters).
// In double, on the host (CPU backend) and in CUDA kernels alike, so both round the same values.
#pragma once

#include <cmath>

#include "mpitrain/model/config.hpp"

#ifdef __CUDACC__
#define MPITRAIN_ROPE_HD __host__ __device__
#else
#define MPITRAIN_ROPE_HD
#endif

namespace mpitrain {

struct RopeFreqs {
  using Scaling = ModelConfig::RopeScaling;
  double theta = 10000.0;
  Scaling scaling;
  int first_position = 0;  // the position of each sequence's row 0 (a context-parallel chunk's)

  // A plain base theta is unscaled RoPE (implicit: the tests' and tools' rope calls pass one).
  RopeFreqs(double base, const Scaling& s = {}) : theta(base), scaling(s) {}  // NOLINT

  // theta^(-2i/hs), then scaled
  MPITRAIN_ROPE_HD double inv_freq(int i, int hs) const {
    const double f = pow(theta, -2.0 * i / hs);
    if (scaling.type == Scaling::Type::None) return f;
    if (scaling.type == Scaling::Type::Linear) return f / scaling.factor;
    // llama3: wavelength 2 pi / f against the original context's low/high-frequency wavelengths
    const double kPi = 3.14159265358979323846, wavelen = 2.0 * kPi / f;
    const double orig = scaling.original_max_position, low = scaling.low_freq_factor,
                 high = scaling.high_freq_factor;
    if (wavelen < orig / high) return f;                  // high frequency: kept
    if (wavelen > orig / low) return f / scaling.factor;  // low frequency: scaled
    const double smooth = (orig / wavelen - low) / (high - low);
    return (1.0 - smooth) * f / scaling.factor + smooth * f;
  }
};

}  // namespace mpitrain
