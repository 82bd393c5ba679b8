// RoPE's frequencies, for the backends' rope ops: pair i of a head of size hs at position t turns
// by t * inv_freq(i, hs) and is multiplied by attention_factor(), with the model's frequency
// scaling applied as transformers does (modeling_rope_utils.py:
// _compute_linear_scaling_rope_parameters, _compute_llama3_parameters, _compute_yarn_parameters).
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
    const double kPi = 3.14159265358979323846, orig = scaling.original_max_position;
    if (scaling.type == Scaling::Type::Yarn) {
      // the pair index turning r times in orig positions: hs ln(orig / (2 pi r)) / (2 ln theta);
      // pairs below the beta_fast index keep f, above the beta_slow one take f / factor
      const auto turning = [&](double r) {
        return hs * log(orig / (r * 2.0 * kPi)) / (2.0 * log(theta));
      };
      const double low = fmax(floor(turning(scaling.beta_fast)), 0.0);
      double high = fmin(ceil(turning(scaling.beta_slow)), hs - 1.0);
      if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
      const double ramp = fmin(fmax((i - low) / (high - low), 0.0), 1.0);
      return f / scaling.factor * ramp + f * (1.0 - ramp);
    }
    // llama3: wavelength 2 pi / f against the original context's low/high-frequency wavelengths
    const double wavelen = 2.0 * kPi / f, low = scaling.low_freq_factor,
                 high = scaling.high_freq_factor;
    if (wavelen < orig / high) return f;                  // high frequency: kept
    if (wavelen > orig / low) return f / scaling.factor;  // low frequency: scaled
    const double smooth = (orig / wavelen - low) / (high - low);
    return (1.0 - smooth) * f / scaling.factor + smooth * f;
  }

  // what cos and sin are multiplied by: yarn's attention factor (the scores by its square)
  MPITRAIN_ROPE_HD double attention_factor() const {
    if (scaling.type != Scaling::Type::Yarn) return 1.0;
    if (scaling.attention_factor > 0.0f) return scaling.attention_factor;
    return scaling.factor > 1.0f ? 0.1 * log(static_cast<double>(scaling.factor)) + 1.0 : 1.0;
  }
};

}  // namespace mpitrain
