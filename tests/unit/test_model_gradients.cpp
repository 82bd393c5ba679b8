// Whole-model gradient check in double precision: every parameter's analytic gradient (forward +
// backward through all layers) against a central finite difference of the loss.
//
// Tolerance: with h = 1e-5 the central difference has truncation error ~h^2 |f'''| ~ 1e-10 and
// rounding error ~1e-16 |f| / h ~ 1e-11, so analytic and numeric gradients agree to ~1e-9; we
// allow 1e-7 (absolute + relative) which still catches any missing or wrong term (those are
// O(1e-3) or larger for these parameter scales).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/rng.hpp"

using namespace mpitrain;

namespace {

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::Llama ? 2 : 4;  // grouped-query attention for llama
  c.d_model = 16;
  c.d_ff = 24;
  c.vocab_size = 20;  // padded to 128: padding rows must get zero gradient
  c.max_seq_len = 6;
  return c;
}

// doc_starts: (2, 5) document starts (document masking), or null; options: the model's.
void check_all_gradients(const ModelConfig& config, const int32_t* doc_starts = nullptr,
                         const ModelOptions& options = {}) {
  CpuBackend<double> backend(1);
  const int B = 2, T = 5;
  Model<double> model(config, backend, {}, B, T, 1, nullptr, options);
  model.init(7);
  // Move off the initial point so that biases (0) and norm weights (1) get generic gradients.
  Rng rng(11, 0);
  const ModelConfig& cfg = model.config();
  for (const ParamTensor& t : model.layout().tensors()) {
    const bool vocab_table = t.slot == Slot::Wte || t.slot == Slot::LmHead;
    const size_t real = vocab_table ? static_cast<size_t>(cfg.vocab_size) * cfg.d_model : t.numel;
    for (size_t j = 0; j < real; ++j) model.params().full()[t.offset + j] += 0.1 * rng.normal();
  }
  std::vector<int32_t> tokens(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
    targets[i] = static_cast<int32_t>(rng.below(cfg.vocab_size));
  }
  const double dloss = 1.0 / (B * T);  // gradient of the mean loss

  // What zero_grads does not zero, the first backward must write over (backward_writes_whole).
  std::fill_n(model.grads(), model.num_params(), std::numeric_limits<double>::quiet_NaN());
  model.zero_grads();
  model.forward(0, tokens.data(), targets.data(), B, T, dloss, doc_starts);
  model.backward(0, tokens.data(), B, T, {}, doc_starts);
  const std::vector<double> analytic(model.grads(), model.grads() + model.num_params());

  auto loss = [&] {
    return model.forward(0, tokens.data(), targets.data(), B, T, 0.0, doc_starts) * dloss;
  };
  const double h = 1e-5;
  size_t nonzero = 0;
  for (const ParamTensor& t : model.layout().tensors()) {
    for (size_t j = 0; j < t.numel; ++j) {
      double& w = model.params().full()[t.offset + j];
      const double saved = w;
      w = saved + h;
      const double up = loss();
      w = saved - h;
      const double down = loss();
      w = saved;
      const double numeric = (up - down) / (2 * h);
      const double a = analytic[t.offset + j];
      ASSERT_NEAR(a, numeric, 1e-7 * (1 + std::abs(numeric))) << t.name << "[" << j << "]";
      nonzero += std::abs(a) > 1e-9;
    }
  }
  // Most parameters must really carry gradient (all but padded vocabulary rows, unseen tokens).
  EXPECT_GT(nonzero, model.num_params() / 2);
}

}  // namespace

TEST(ModelGradients, Gpt2AllParametersMatchFiniteDifferences) {
  check_all_gradients(tiny(Arch::Gpt2));
}

TEST(ModelGradients, LlamaAllParametersMatchFiniteDifferences) {
  check_all_gradients(tiny(Arch::Llama));
}

// The model features of other families, each with the tensors it adds (so the check covers them).
TEST(ModelGradients, Gpt2UntiedHeadMatchesFiniteDifferences) {
  ModelConfig c = tiny(Arch::Gpt2);
  c.tie_embeddings = false;
  ASSERT_TRUE(ParamLayout(c).has(Slot::LmHead));
  check_all_gradients(c);
}

// Llama's attention_bias and mlp_bias, a tied head, and heads of 6 (q width 24, d-model 16).
TEST(ModelGradients, LlamaTiedBiasesHeadDimMatchFiniteDifferences) {
  ModelConfig c = tiny(Arch::Llama);
  c.tie_embeddings = c.qkv_bias = c.proj_bias = c.mlp_bias = true;
  c.head_dim = 6;
  const ParamLayout layout(c);
  ASSERT_FALSE(layout.has(Slot::LmHead));
  for (Slot s : {Slot::QkvB, Slot::ProjB, Slot::FcB, Slot::FcProjB}) ASSERT_TRUE(layout.has(s, 1));
  EXPECT_EQ(layout.find("h.0.attn.qkv.weight").global_shape, (std::vector<int64_t>{48, 16}));
  EXPECT_EQ(layout.find("h.0.attn.proj.weight").global_shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(layout.find("h.0.mlp.fc.bias").global_shape, (std::vector<int64_t>{48}));
  check_all_gradients(c);
}

// Qwen2: biases on q, k, v only.
TEST(ModelGradients, LlamaQkvBiasOnlyMatchesFiniteDifferences) {
  ModelConfig c = tiny(Arch::Llama);
  c.qkv_bias = true;
  const ParamLayout layout(c);
  ASSERT_TRUE(layout.has(Slot::QkvB, 0));
  ASSERT_FALSE(layout.has(Slot::ProjB, 0));
  check_all_gradients(c);
}

// Qwen3's q/k norms (their weights moved off 1 by the check) and Llama 3's frequency scaling with
// an original context of 8 positions, so that of the 2 frequencies of a head of 4 (wavelengths
// 6.3 and 628) one is blended, one divided.
TEST(ModelGradients, LlamaQkNormAndLlama3RopeMatchFiniteDifferences) {
  ModelConfig c = tiny(Arch::Llama);
  c.qk_norm = true;
  c.rope_scaling.type = ModelConfig::RopeScaling::Type::Llama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.original_max_position = 8;
  check_all_gradients(c);
}

// YaRN over an original context of 1000 positions: of a head of 4's 2 frequencies, pair 0 kept
// and pair 1 blended half-way (the ramp runs from pair 0 to 2); cos and sin times 0.1 ln 8 + 1.
TEST(ModelGradients, LlamaYarnRopeMatchesFiniteDifferences) {
  ModelConfig c = tiny(Arch::Llama);
  c.rope_scaling = parse_rope_scaling("yarn:factor=8,orig=1000");
  const RopeFreqs rope(c.rope_theta, c.rope_scaling);
  ASSERT_EQ(rope.inv_freq(0, c.head_size()), 1.0);
  ASSERT_NEAR(rope.inv_freq(1, c.head_size()), 0.01 * (0.5 / 8 + 0.5), 1e-15);
  check_all_gradients(c);
}

// Mistral's sliding window of 2 over T 5: each query sees itself and the position before, in
// forward and backward alike (a backward without the window would give the gradient of another
// loss).
TEST(ModelGradients, LlamaSlidingWindowMatchesFiniteDifferences) {
  ModelConfig c = tiny(Arch::Llama);
  c.sliding_window = 2;
  check_all_gradients(c);
}

// Document masking over T 5: sequence 0 holds documents [0, 2) and [2, 5), sequence 1 [0, 1),
// [1, 4) and [4, 5); no query sees a key before its document's start, in forward and backward
// alike (a backward without the documents would give the gradient of another loss). With llama's
// window of 2 as well: each query's first key is the later of the two. With document positions
// too (gpt2's wpe rows and llama's RoPE from each document's first token: wpe's gradient summed
// by runs).
TEST(ModelGradients, DocumentMaskMatchesFiniteDifferences) {
  const std::vector<int32_t> starts = {0, 0, 2, 2, 2, 0, 1, 1, 1, 4};
  check_all_gradients(tiny(Arch::Gpt2), starts.data());
  ModelConfig c = tiny(Arch::Llama);
  c.sliding_window = 2;
  check_all_gradients(c, starts.data());
  ModelOptions positions;
  positions.document_positions = true;
  check_all_gradients(tiny(Arch::Gpt2), starts.data(), positions);
  check_all_gradients(tiny(Arch::Llama), starts.data(), positions);
}

// gpt2 without the 1/sqrt(hs) and with the scores of block l divided by l + 1.
TEST(ModelGradients, Gpt2AttentionScaleSwitchesMatchFiniteDifferences) {
  ModelConfig c = tiny(Arch::Gpt2);
  c.scale_attn_weights = false;
  c.scale_attn_by_inverse_layer_idx = true;
  check_all_gradients(c);
}

TEST(ModelGradients, GradientsAccumulateOverMicroBatches) {
  CpuBackend<double> backend(1);
  Model<double> model(tiny(Arch::Gpt2), backend, {}, 2, 5);
  model.init(3);
  std::vector<int32_t> tokens(10), targets(10);
  for (int i = 0; i < 10; ++i) tokens[i] = i % 20, targets[i] = (3 * i + 1) % 20;
  auto micro_batch = [&] {
    model.forward(0, tokens.data(), targets.data(), 2, 5, 1.0);
    model.backward(0, tokens.data(), 2, 5);
  };
  model.zero_grads();
  micro_batch();
  const std::vector<double> once(model.grads(), model.grads() + model.num_params());
  micro_batch();
  for (size_t i = 0; i < once.size(); ++i) ASSERT_NEAR(model.grads()[i], 2 * once[i], 1e-12 + 1e-12 * std::abs(once[i]));
  // The next step: zero_grads, and its first micro-batch writes the linear layers' over the last
  // step's sums.
  model.zero_grads();
  micro_batch();
  for (size_t i = 0; i < once.size(); ++i) ASSERT_EQ(model.grads()[i], once[i]) << i;
}
