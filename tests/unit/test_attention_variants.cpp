// The attention variants of issue 34 on the CPU backend, in double precision: RoPE frequency
// scaling (llama3, linear) against a table written from transformers' modeling_rope_utils.py,
// the per-head q/k RMSNorm against its formula and finite differences, and the attention scale.
#include <gtest/gtest.h>

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

Scaling llama3(float factor, float low, float high, int orig) {
  Scaling s;
  s.type = Scaling::Type::Llama3;
  s.factor = factor, s.low_freq_factor = low, s.high_freq_factor = high;
  s.original_max_position = orig;
  return s;
}

}  // namespace

// Llama 3.2 1B's rope_scaling (factor 32, low 1, high 4, 8192) and head size 64, theta 5e5: its
// 32 frequencies fall in all three bands (kept, divided, blended).
TEST(RopeScaling, Llama3TableMatchesTransformers) {
  const int hs = 64;
  const RopeFreqs rope(500000.0, llama3(32, 1, 4, 8192));
  const Vec want = transformers_llama3(500000.0, hs, 32, 1, 4, 8192);
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < hs / 2; ++i) {
    const double plain = std::pow(500000.0, -2.0 * i / hs);
    EXPECT_NEAR(rope.inv_freq(i, hs), want[i], 1e-15 * want[i]) << "pair " << i;
    const double tol = 1e-12 * plain;
    kept += std::abs(want[i] - plain) < tol;
    divided += std::abs(want[i] - plain / 32) < tol;
    blended += want[i] < plain - tol && want[i] > plain / 32 + tol;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
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
  for (const char* bad : {"yarn:factor=2", "linear", "linear:factor=x", "linear:factor=2,low=1",
                          "llama3:factor=8,low=1,high=4", "llama3:factor=8,low=1,high=4,orig=1.5",
                          "linear:factor=2,factor=3", "none:factor=1"})
    EXPECT_THROW(parse_rope_scaling(bad), UsageError) << bad;
  ModelConfig c;
  c.set_arch(Arch::Llama);
  c.rope_scaling = llama3(8, 4, 1, 8192);  // low >= high: the blend divides by zero
  EXPECT_THROW(c.validate(), UsageError);
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
  be.attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH, NKV, hs, s);
  Vec q_scaled = qkv, out2(out.size());
  for (int t = 0; t < T; ++t)
    for (int c = 0; c < NH * hs; ++c) q_scaled[t * QKV + c] *= s * std::sqrt(double(hs));
  be.attention_forward(out2.data(), probs.data(), q_scaled.data(), B, T, NH, NKV, hs,
                       1 / std::sqrt(double(hs)));
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], out2[i], 1e-14);

  const Vec R = random_vec(out.size(), 6);
  auto loss = [&] {
    be.attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH, NKV, hs, s);
    return dot(out, R);
  };
  loss();
  Vec dqkv(qkv.size()), scratch(probs.size());
  be.attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), out.data(), probs.data(),
                        B, T, NH, NKV, hs, s);
  expect_grad("dqkv", qkv, dqkv, loss);
}
