// The attention variants of issue 34 on the CPU backend, in double precision: RoPE frequency
// scaling (llama3, linear) against a table written from transformers' modeling_rope_utils.py,
// the per-head q/k RMSNorm against its formula and finite differences, and the attention scale.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;
using mpitrain::testing::dot;
using mpitrain::testing::expect_grad;
using mpitrain::testing::random_vec;
using Vec = std::vector<double>;
using Scaling = ModelConfig::RopeScaling;

namespace {

// transformers' _compute_llama3_parameters, a tensor op at a time, in double:
//   inv_freq = 1 / base^(arange(0, dim, 2) / dim); wavelen = 2 pi / inv_freq
//   inv_freq_llama = where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
//   smooth = (old_context_len / wavelen - low) / (high - low)
//   smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
//   is_medium = !(wavelen < high_freq_wavelen) & !(wavelen > low_freq_wavelen)
//   result = where(is_medium, smoothed, inv_freq_llama)
Vec transformers_llama3(double base, int dim, double factor, double low, double high, double old) {
  Vec out;
  const double low_freq_wavelen = old / low, high_freq_wavelen = old / high;
  for (int k = 0; k < dim; k += 2) {
    const double inv_freq = 1.0 / std::pow(base, static_cast<double>(k) / dim);
    const double wavelen = 2 * M_PI / inv_freq;
    const double llama = wavelen > low_freq_wavelen ? inv_freq / factor : inv_freq;
    const double smooth = (old / wavelen - low) / (high - low);
    const double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    out.push_back(medium ? smoothed : llama);
  }
  return out;
}

// transformers' _compute_yarn_parameters, a step at a time, in double (truncate true):
//   find_correction_dim(r) = dim ln(orig / (r 2 pi)) / (2 ln base)
//   low = max(floor(dim(beta_fast)), 0); high = min(ceil(dim(beta_slow)), dim - 1)
//   if low == high: high += 0.001
//   ramp = clamp((arange(dim / 2) - low) / (high - low), 0, 1); extrapolation = 1 - ramp
//   inv_freq = interpolation (1 - extrapolation) + extrapolation_freq extrapolation
//   where interpolation = 1 / (factor pos_freqs), extrapolation_freq = 1 / pos_freqs
Vec transformers_yarn(double base, int dim, double factor, double orig, double beta_fast,
                      double beta_slow) {
  const auto correction_dim = [&](double r) {
    return dim * std::log(orig / (r * 2 * M_PI)) / (2 * std::log(base));
  };
  const double low = std::max(std::floor(correction_dim(beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(beta_slow)), dim - 1.0);
  if (low == high) high += 0.001;
  Vec out;
  for (int k = 0; k < dim; k += 2) {
    const double pos_freq = std::pow(base, static_cast<double>(k) / dim);
    const double ramp = std::clamp((k / 2 - low) / (high - low), 0.0, 1.0);
    const double extrapolation = 1 - ramp;
    out.push_back(1 / (factor * pos_freq) * (1 - extrapolation) + 1 / pos_freq * extrapolation);
  }
  return out;
}

Scaling yarn(float factor, int orig) {
  Scaling s;
  s.type = Scaling::Type::Yarn;
  s.factor = factor;
  s.original_max_position = orig;
  return s;
}

Scaling llama3(float factor, float low, float high, int orig) {
  Scaling s;
  s.type = Scaling::Type::Llama3;
  s.factor = factor, s.low_freq_factor = low, s.high_freq_factor = high;
  s.original_max_position = orig;
  return s;
}

// How many of a head's scaled frequencies match the table `want` (within 1e-15 relative, each
// pair checked), and of them how many are theta^(-2i/hs) kept, divided by factor, or between.
struct Bands {
  int kept = 0, divided = 0, blended = 0;
};
Bands matching_bands(const RopeFreqs& rope, const Vec& want, int hs, double factor) {
  Bands b;
  for (int i = 0; i < hs / 2; ++i) {
    const double plain = std::pow(rope.theta, -2.0 * i / hs), tol = 1e-12 * plain;
    EXPECT_NEAR(rope.inv_freq(i, hs), want[i], 1e-15 * want[i]) << "pair " << i;
    b.kept += std::abs(want[i] - plain) < tol;
    b.divided += std::abs(want[i] - plain / factor) < tol;
    b.blended += want[i] < plain - tol && want[i] > plain / factor + tol;
  }
  return b;
}

}  // namespace

// Llama 3.2 1B's rope_scaling (factor 32, low 1, high 4, 8192) and head size 64, theta 5e5: its
// 32 frequencies fall in all three bands (kept, divided, blended).
TEST(RopeScaling, Llama3TableMatchesTransformers) {
  const int hs = 64;
  const RopeFreqs rope(500000.0, llama3(32, 1, 4, 8192));
  const Bands b = matching_bands(rope, transformers_llama3(500000.0, hs, 32, 1, 4, 8192), hs, 32);
  EXPECT_GT(b.kept, 0);
  EXPECT_GT(b.divided, 0);
  EXPECT_GT(b.blended, 0);
}

// Qwen3's documented YaRN (factor 4 over 32768 positions) at its head size 128 and theta 1e6:
// pairs 0-23 kept, 40-63 divided, 24-39 blended; cos and sin times 0.1 ln 4 + 1.
TEST(RopeScaling, YarnTableMatchesTransformers) {
  const int hs = 128;
  const RopeFreqs rope(1e6, yarn(4, 32768));
  const Bands b = matching_bands(rope, transformers_yarn(1e6, hs, 4, 32768, 32, 1), hs, 4);
  EXPECT_EQ(b.kept, 24);
  EXPECT_EQ(b.divided, 24);
  EXPECT_EQ(b.blended, 16);
  EXPECT_EQ(rope.attention_factor(), 0.1 * std::log(4.0) + 1);
  Scaling given = yarn(4, 32768);  // betas 8 and 2: the ramp from pair 30 to 37
  given.attention_factor = 0.5f, given.beta_fast = 8, given.beta_slow = 2;
  const RopeFreqs betas(1e6, given);
  EXPECT_EQ(betas.attention_factor(), 0.5);
  EXPECT_EQ(matching_bands(betas, transformers_yarn(1e6, hs, 4, 32768, 8, 2), hs, 4).blended, 6);
  EXPECT_EQ(RopeFreqs(1e6, yarn(0.5f, 32768)).attention_factor(), 1.0);  // factor <= 1
  EXPECT_EQ(RopeFreqs(1e6, llama3(32, 1, 4, 8192)).attention_factor(), 1.0);
}

// yarn's rope op: the rotation by the yarn table, times the attention factor; its backward is
// the forward's transpose (<dy, f(x)> = <f'(dy), x>), the factor included.
TEST(RopeScaling, YarnRotatesScalesAndBackwardIsTheTranspose) {
  CpuBackend<double> be(1);
  const int B = 2, T = 5, NH = 2, NKV = 1, hs = 8, QKV = (NH + 2 * NKV) * hs;
  const RopeFreqs rope(10000.0, yarn(8, 4));
  const Vec want = transformers_yarn(10000.0, hs, 8, 4, 32, 1);
  const double a = 0.1 * std::log(8.0) + 1;
  Vec qkv = random_vec(B * T * QKV, 3);
  const Vec x = qkv;
  be.rope_forward(qkv.data(), B, T, NH, NKV, hs, rope);
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < QKV; c += 2) {
        const int k = (b * T + t) * QKV + c, i = c % hs / 2;
        const bool v = c >= (NH + NKV) * hs;  // v is not rotated
        const double angle = t * want[i], s = v ? 1 : a;
        EXPECT_NEAR(qkv[k], v ? x[k] : s * (x[k] * std::cos(angle) - x[k + 1] * std::sin(angle)),
                    1e-14);
        EXPECT_NEAR(qkv[k + 1],
                    v ? x[k + 1] : s * (x[k] * std::sin(angle) + x[k + 1] * std::cos(angle)),
                    1e-14);
      }
  Vec dy = random_vec(qkv.size(), 4);
  const double forward = dot(dy, qkv);
  be.rope_backward(dy.data(), B, T, NH, NKV, hs, rope);
  EXPECT_NEAR(dot(dy, x), forward, 1e-12 * std::abs(forward));
}

TEST(RopeScaling, LinearDividesEveryFrequencyAndNoneIsPlain) {
  Scaling linear;
  linear.type = Scaling::Type::Linear;
  linear.factor = 4;
  for (int i = 0; i < 8; ++i) {
    const double plain = 1.0 / std::pow(10000.0, 2.0 * i / 16);
    EXPECT_NEAR(RopeFreqs(10000.0, linear).inv_freq(i, 16), plain / 4, 1e-15 * plain);
    EXPECT_NEAR(RopeFreqs(10000.0).inv_freq(i, 16), plain, 1e-15 * plain);
  }
}

TEST(RopeScaling, ParsesPrintsAndRefuses) {
  const Scaling s = parse_rope_scaling("llama3:factor=32,low=1,high=4,orig=8192");
  EXPECT_EQ(to_string(s), "llama3:factor=32,low=1,high=4,orig=8192");
  EXPECT_EQ(parse_rope_scaling(to_string(s)).original_max_position, 8192);
  EXPECT_EQ(to_string(parse_rope_scaling("linear:factor=2.5")), "linear:factor=2.5");
  EXPECT_EQ(parse_rope_scaling("none").type, Scaling::Type::None);
  const Scaling y = parse_rope_scaling("yarn:factor=4,orig=32768");
  EXPECT_EQ(y.type, Scaling::Type::Yarn);
  EXPECT_EQ(to_string(y), "yarn:factor=4,orig=32768,beta_fast=32,beta_slow=1");
  const char* full = "yarn:factor=2.5,orig=4096,beta_fast=16,beta_slow=2,attn=1.25";
  EXPECT_EQ(to_string(parse_rope_scaling(full)), full);
  EXPECT_EQ(parse_rope_scaling(full).attention_factor, 1.25f);
  for (const char* bad :
       {"dynamic:factor=2", "yarn:factor=2", "yarn:orig=64", "yarn:factor=2,orig=64,attn=0",
        "yarn:factor=2,orig=64,low=1", "linear", "linear:factor=x", "linear:factor=2,low=1",
        "linear:factor=2,attn=1", "llama3:factor=8,low=1,high=4",
        "llama3:factor=8,low=1,high=4,orig=1.5", "linear:factor=2,factor=3", "none:factor=1"})
    EXPECT_THROW(parse_rope_scaling(bad), UsageError) << bad;
  ModelConfig c;
  c.set_arch(Arch::Llama);
  c.rope_scaling = llama3(8, 4, 1, 8192);  // low >= high: the blend divides by zero
  EXPECT_THROW(c.validate(), UsageError);
  c.rope_scaling = parse_rope_scaling("yarn:factor=4,orig=64,beta_fast=1,beta_slow=32");
  EXPECT_THROW(c.validate(), UsageError);  // the ramp would run backwards
  c.rope_scaling = parse_rope_scaling("yarn:factor=4,orig=64,beta_fast=8,beta_slow=8");
  EXPECT_NO_THROW(c.validate());
  c.rope_scaling = {};
  c.scale_attn_weights = false;  // gpt2's switch on a llama
  EXPECT_THROW(c.validate(), UsageError);
  c.set_arch(Arch::Gpt2);
  EXPECT_NO_THROW(c.validate());
  c.qk_norm = true;  // llama's q/k norm on a gpt2
  EXPECT_THROW(c.validate(), UsageError);
}

// The rope op turns pair i at position t by t * inv_freq(i) of the scaled table.
TEST(RopeScaling, RopeRotatesByScaledFrequencies) {
  CpuBackend<double> be(1);
  const int B = 1, T = 4, NH = 1, NKV = 1, hs = 8, QKV = (NH + 2 * NKV) * hs;
  const RopeFreqs rope(10000.0, llama3(8, 1, 4, 64));
  const Vec want = transformers_llama3(10000.0, hs, 8, 1, 4, 64);
  Vec qkv = random_vec(B * T * QKV, 3);
  const Vec x = qkv;
  be.rope_forward(qkv.data(), B, T, NH, NKV, hs, rope);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NH + NKV; ++h)
      for (int i = 0; i < hs / 2; ++i) {
        const int k = t * QKV + h * hs + 2 * i;
        const double a = t * want[i];
        EXPECT_NEAR(qkv[k], x[k] * std::cos(a) - x[k + 1] * std::sin(a), 1e-14);
        EXPECT_NEAR(qkv[k + 1], x[k] * std::sin(a) + x[k + 1] * std::cos(a), 1e-14);
      }
}

// out's q and k heads = x / sqrt(mean(x^2) + eps) * w (wq for q heads, wk for k), v copied.
TEST(CpuQkNorm, ForwardIsPerHeadRmsNormAndBackwardMatchesFiniteDifferences) {
  CpuBackend<double> be(1);
  // hs 18: the weight gradients' columns in two pieces (16 + 2, cpu_qk_norm.cpp)
  const int N = 3, NH = 4, NKV = 2, hs = 18, QKV = (NH + 2 * NKV) * hs;
  const double eps = 1e-6;
  Vec inp = random_vec(N * QKV, 1), wq = random_vec(hs, 2, 0.5, 1.5),
      wk = random_vec(hs, 3, 0.5, 1.5);
  Vec out(N * QKV), rstd(N * (NH + NKV));
  be.qk_norm_forward(out.data(), rstd.data(), inp.data(), wq.data(), wk.data(), N, NH, NKV, hs,
                     eps);
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < NH + 2 * NKV; ++h) {
      const double* x = &inp[n * QKV + h * hs];
      double ms = 0;
      for (int c = 0; c < hs; ++c) ms += x[c] * x[c] / hs;
      for (int c = 0; c < hs; ++c) {
        const double w = h < NH ? wq[c] : wk[c];
        const double want = h < NH + NKV ? x[c] / std::sqrt(ms + eps) * w : x[c];
        EXPECT_NEAR(out[n * QKV + h * hs + c], want, 1e-14) << "row " << n << " head " << h;
      }
    }

  const Vec R = random_vec(N * QKV, 4);
  auto loss = [&] {
    be.qk_norm_forward(out.data(), rstd.data(), inp.data(), wq.data(), wk.data(), N, NH, NKV, hs,
                       eps);
    return dot(out, R);
  };
  loss();
  Vec d = R, dwq(hs, 0.5), dwk(hs, -0.25);  // weight gradients accumulate onto what is there
  be.qk_norm_backward(d.data(), dwq.data(), dwk.data(), inp.data(), wq.data(), wk.data(),
                      rstd.data(), N, NH, NKV, hs);
  for (double& g : dwq) g -= 0.5;
  for (double& g : dwk) g += 0.25;
  expect_grad("dinp", inp, d, loss);
  expect_grad("dwq", wq, dwq, loss);
  expect_grad("dwk", wk, dwk, loss);
}

// attention with scale s on q equals the default scale on q * s sqrt(hs); its backward matches
// finite differences at that scale (gpt2's scale_attn_weights false and the per-layer divisor).
TEST(CpuAttention, ScaleMultipliesTheScores) {
  CpuBackend<double> be(1);
  const int B = 1, T = 4, NH = 2, NKV = 1, hs = 4, QKV = (NH + 2 * NKV) * hs, A = NH * hs;
  const double s = 1.0 / 3.0;  // unscaled weights in block 2 (0-based): 1 / (2 + 1)
  Vec qkv = random_vec(B * T * QKV, 5, -2, 2), out(B * T * A), probs(B * NH * T);
  be.attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH, NKV, hs, s, 0);
  Vec q_scaled = qkv, out2(out.size());
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < NH * hs; ++c) q_scaled[t * QKV + c] *= s * std::sqrt(double(hs));
  be.attention_forward(out2.data(), probs.data(), q_scaled.data(), B, T, NH, NKV, hs,
                       1 / std::sqrt(double(hs)), 0);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], out2[i], 1e-14);

  const Vec R = random_vec(out.size(), 6);
  auto loss = [&] {
    be.attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH, NKV, hs, s, 0);
    return dot(out, R);
  };
  loss();
  Vec dqkv(qkv.size()), scratch(probs.size());
  be.attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), out.data(), probs.data(),
                        B, T, NH, NKV, hs, s, 0);
  expect_grad("dqkv", qkv, dqkv, loss);
}
