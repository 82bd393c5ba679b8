// The model's memory savers: activation recomputation must not change a single bit of the loss or
// the gradients, and low precision must keep every stored activation a value of that precision
// while the loss stays close to fp32's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/rng.hpp"

using namespace mpitrain;

namespace {

ModelConfig small(Arch arch) {
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::Llama ? 2 : 4;
  c.d_model = 32;
  c.d_ff = 48;
  c.vocab_size = 50;
  c.max_seq_len = 8;
  return c;
}

struct Result {
  std::vector<double> losses;
  std::vector<float> grads;
  std::vector<float> output;  // the first slot's stage output after its forward
};

// Two micro-batches in two slots, run as a pipeline would: F0 F1 B0 B1, so the buffers that
// recomputation shares between slots are overwritten between a forward and its backward.
Result run(const ModelConfig& config, ModelOptions options, float dloss = 1.0f / 32,
           size_t* activation_bytes = nullptr) {
  CpuBackend<float> backend(1, options.precision);
  const int B = 2, T = 8;
  Model<float> model(config, backend, {}, B, T, 2, nullptr, options);
  model.init(3);  // 2-byte storage: rounded as written; fp32 containers: rounded here
  if (float* emulated = model.params().full())
    backend.round_to(emulated, model.num_params(), options.precision);
  Rng rng(5, 0);
  std::vector<int32_t> tokens(2 * B * T), targets(2 * B * T);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(50));
    targets[i] = static_cast<int32_t>(rng.below(50));
  }
  Result r;
  model.zero_grads();
  for (int m = 0; m < 2; ++m) {
    r.losses.push_back(model.forward(m, tokens.data() + m * B * T, targets.data() + m * B * T, B, T, dloss));
    if (m == 0) {
      r.output.resize(B * T * 32);
      backend.download(r.output.data(), model.output(0), r.output.size());
    }
  }
  for (int m = 0; m < 2; ++m) model.backward(m, tokens.data() + m * B * T, B, T);
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  if (activation_bytes) *activation_bytes = model.activation_bytes();
  return r;
}

Result run(Arch arch, ModelOptions options, float dloss = 1.0f / 32,
           size_t* activation_bytes = nullptr) {
  return run(small(arch), options, dloss, activation_bytes);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

class Recomputation : public ::testing::TestWithParam<std::tuple<Arch, Precision>> {};

TEST_P(Recomputation, IsBitIdenticalAndSavesMemory) {
  const auto [arch, precision] = GetParam();
  size_t bytes[3];
  const Result none = run(arch, {precision, Recompute::None}, 1.0f / 32, &bytes[0]);
  const Result selective = run(arch, {precision, Recompute::Selective}, 1.0f / 32, &bytes[1]);
  const Result full = run(arch, {precision, Recompute::Full}, 1.0f / 32, &bytes[2]);
  for (const Result* r : {&selective, &full}) {
    ASSERT_EQ(r->losses.size(), none.losses.size());
    for (size_t m = 0; m < none.losses.size(); ++m) EXPECT_EQ(r->losses[m], none.losses[m]);
    EXPECT_TRUE(same_bits(r->grads, none.grads));
    EXPECT_TRUE(same_bits(r->output, none.output));
  }
  EXPECT_LT(bytes[1], bytes[0]);
  EXPECT_LT(bytes[2], bytes[1]);
}

INSTANTIATE_TEST_SUITE_P(Model, Recomputation,
                         ::testing::Combine(::testing::Values(Arch::Gpt2, Arch::Llama),
                                            ::testing::Values(Precision::Fp32, Precision::Bf16)));

// Compute tensors held in 2 bytes give the bits of the emulated path (fp32 containers rounded
// after each op): the same rounding points, the same float arithmetic between them. Losses,
// parameter gradients and the stage output are compared bit for bit, for both architectures,
// both 2-byte types and every recomputation mode; the activations take exactly half the bytes
// of the emulated path's compute tensors (the fp32 statistics unchanged).
class TwoByteStorage
    : public ::testing::TestWithParam<std::tuple<Arch, Precision, Recompute>> {};

TEST_P(TwoByteStorage, GivesTheEmulatedPathsBits) {
  const auto [arch, precision, recompute] = GetParam();
  size_t emulated_bytes = 0, stored_bytes = 0;
  const Result emulated = run(arch, {precision, recompute, Precision::Fp32}, 1.0f / 32, &emulated_bytes);
  const Result stored = run(arch, {precision, recompute, precision}, 1.0f / 32, &stored_bytes);
  ASSERT_EQ(stored.losses.size(), emulated.losses.size());
  for (size_t m = 0; m < emulated.losses.size(); ++m) EXPECT_EQ(stored.losses[m], emulated.losses[m]);
  EXPECT_TRUE(same_bits(stored.grads, emulated.grads));
  EXPECT_TRUE(same_bits(stored.output, emulated.output));
  EXPECT_LT(stored_bytes, emulated_bytes);
  EXPECT_GT(stored_bytes, emulated_bytes / 2);  // the fp32 statistics stay 4 bytes
}

INSTANTIATE_TEST_SUITE_P(
    Model, TwoByteStorage,
    ::testing::Combine(::testing::Values(Arch::Gpt2, Arch::Llama),
                       ::testing::Values(Precision::Bf16, Precision::Fp16),
                       ::testing::Values(Recompute::None, Recompute::Selective, Recompute::Full)));

// Low precision: every activation the stage hands on is a value of that precision, and the loss
// stays within the precision's reach of fp32's. bf16 keeps 8 significant bits (relative step
// 2^-8 = 3.9e-3), fp16 11 (4.9e-4); the rounding of ~20 tensors per block partly averages out, so
// the loss of a 3-block model moves by well under 1e-2 (bf16) and 2e-3 (fp16) — a missing
// rounding would not fail this, but the representability check does, and a wrong one (truncation,
// a scale error) moves the loss by more.
TEST(LowPrecision, ActivationsAreRepresentableAndLossIsClose) {
  for (Arch arch : {Arch::Gpt2, Arch::Llama}) {
    const Result fp32 = run(arch, {Precision::Fp32, Recompute::None});
    for (auto [precision, tol] : {std::pair{Precision::Bf16, 1e-2}, std::pair{Precision::Fp16, 2e-3}}) {
      const Result low = run(arch, {precision, Recompute::None});
      for (float x : low.output) ASSERT_EQ(round_to(x, precision), x) << to_string(precision);
      for (size_t m = 0; m < fp32.losses.size(); ++m) {
        EXPECT_NEAR(low.losses[m], fp32.losses[m], tol * std::abs(fp32.losses[m])) << to_string(precision);
        EXPECT_NE(low.losses[m], fp32.losses[m]) << "no rounding happened";
      }
      double diff = 0, ref = 0;
      for (size_t i = 0; i < fp32.grads.size(); ++i) {
        diff += std::pow(static_cast<double>(low.grads[i]) - fp32.grads[i], 2);
        ref += std::pow(static_cast<double>(fp32.grads[i]), 2);
      }
      EXPECT_LT(std::sqrt(diff / ref), precision == Precision::Bf16 ? 5e-2 : 1e-2);
    }
  }
}

// fp16's narrow range is why it needs loss scaling: a gradient scaled beyond 65504 overflows to
// inf in the activation gradients, which the trainer's loss scaler must see in the parameter
// gradients.
TEST(LowPrecision, Fp16OverflowReachesTheGradients) {
  const Result ok = run(Arch::Gpt2, {Precision::Fp16, Recompute::None}, 65536.0f / 32);
  for (float g : ok.grads) ASSERT_TRUE(std::isfinite(g));
  const Result over = run(Arch::Gpt2, {Precision::Fp16, Recompute::None}, 1e9f);
  size_t bad = 0;
  for (float g : over.grads) bad += !std::isfinite(g);
  EXPECT_GT(bad, 0u);
}

// The model features of other families (a tied llama head, q/k/v/o and MLP biases, heads of 6:
// attention width 24, d-model 32) under bf16: recomputation and 2-byte storage keep every bit.
TEST(ModelFeatures, RecomputationAndTwoByteStorageKeepTheirBits) {
  ModelConfig c = small(Arch::Llama);
  c.tie_embeddings = c.qkv_bias = c.proj_bias = c.mlp_bias = true;
  c.head_dim = 6;
  const Precision bf16 = Precision::Bf16;
  const Result none = run(c, {bf16, Recompute::None});
  for (Recompute rc : {Recompute::Selective, Recompute::Full}) {
    for (Precision storage : {Precision::Fp32, bf16}) {
      const Result r = run(c, {bf16, rc, storage});
      EXPECT_EQ(r.losses, none.losses);
      EXPECT_TRUE(same_bits(r.grads, none.grads));
      EXPECT_TRUE(same_bits(r.output, none.output));
    }
  }
}
