// The initial parameters (initial_tensors): the GPT-2 scheme's values, drawn in chunks of
// kInitChunk from streams of their own so that the chunks fill in parallel; the values must not
// depend on the thread count, and no two chunks may repeat each other's numbers.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/rng.hpp"
#include "small_llama.hpp"

using namespace mpitrain;

namespace {

// GPT-2 (every bias, tied): wte 300 x 256 (2 chunks, the second cut short; padded to Vp 384),
// attn.qkv 768 x 256 (3).
ModelConfig config() {
  ModelConfig c = test_models::small_llama(256, 512, 300, 16);
  c.set_arch(Arch::Gpt2);
  c.n_kv_head = 4;
  return c;
}

// Every tensor's initial values by name (this shard's part of each), drawn on `threads` threads.
std::map<std::string, std::vector<float>> initial(int threads, uint64_t seed = 5,
                                                  const ModelShard& shard = {}) {
  const ModelConfig c = config();
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  std::map<std::string, std::vector<float>> values;
  initial_tensors<float>(c, ParamLayout(c, shard), seed, [&](const ParamTensor& t, const float* x) {
    values[t.name].assign(x, x + t.numel);
  });
  omp_set_num_threads(before);
  return values;
}

double mean_square(const float* x, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
  return s / double(n);
}

}  // namespace

TEST(ModelInit, SameBitsAtOneTwoAndThreeThreads) {
  const auto one = initial(1);
  for (int threads : {2, 3}) {
    const auto many = initial(threads);
    ASSERT_EQ(many.size(), one.size());
    for (const auto& [name, x] : one) {
      const std::vector<float>& y = many.at(name);
      ASSERT_EQ(y.size(), x.size()) << name;
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
          << name << " at " << threads << " threads";
    }
  }
}

// A rank of a tp or pp layout draws only its part (tp: the chunks of its rows); its values are
// the whole model's, cut.
TEST(ModelInit, ShardsHoldTheirPartOfTheWholeModel) {
  const ModelConfig c = config();
  const auto whole = initial(2);
  const std::vector<ModelShard> shards = {{2, 0}, {2, 1}, {1, 0, 1, 2, false, true}};
  for (const ModelShard& shard : shards) {
    const auto part = initial(2, 5, shard);
    const ParamLayout layout(c, shard);
    for (const ParamTensor& t : layout.tensors()) {
      std::vector<float> expected(t.numel);
      take_shard(t, whole.at(t.name).data(), expected.data());
      EXPECT_EQ(std::memcmp(part.at(t.name).data(), expected.data(), t.numel * sizeof(float)), 0)
          << t.name << " of tp rank " << shard.tp_rank << " / " << shard.tp << ", layers from "
          << shard.layer_begin;
    }
  }
}

TEST(ModelInit, GptTwoScalesZeroPaddingAndOnes) {
  const ModelConfig c = config();
  const auto v = initial(2);
  const size_t C = c.d_model, real = size_t(c.vocab_size) * C;
  const std::vector<float>& wte = v.at("wte");
  ASSERT_EQ(wte.size(), size_t(c.padded_vocab()) * C);
  // 76,800 values of N(0, 0.02^2): the mean square's relative standard error is sqrt(2/n) = 0.5%.
  EXPECT_NEAR(mean_square(wte.data(), real) / (0.02 * 0.02), 1.0, 0.03);
  for (size_t i = real; i < wte.size(); ++i) ASSERT_EQ(wte[i], 0.0f) << "padding row value " << i;
  // Output projections: 0.02 / sqrt(2 L) (65,536 values, relative standard error 0.55%).
  const std::vector<float>& proj = v.at("h.1.attn.proj.weight");
  EXPECT_NEAR(mean_square(proj.data(), proj.size()) / (0.0004 / (2.0 * c.n_layer)), 1.0, 0.03);
  for (float b : v.at("h.0.attn.qkv.bias")) ASSERT_EQ(b, 0.0f);
  for (float w : v.at("h.0.ln1.weight")) ASSERT_EQ(w, 1.0f);
}

TEST(ModelInit, ChunksAndTensorsDrawTheirOwnNumbers) {
  const auto v = initial(2);
  const size_t n = rng_stream::kInitChunk;
  const std::vector<float>& qkv = v.at("h.0.attn.qkv.weight");
  ASSERT_GE(qkv.size(), 3 * n);
  // Chunk 1 is not chunk 0 again, nor chunk 0 of the next layer's qkv, nor another seed's.
  const std::vector<float>& next = v.at("h.1.attn.qkv.weight");
  const auto other = initial(1, 6);
  const std::vector<float>& other_seed = other.at("h.0.attn.qkv.weight");
  int same_chunk = 0, same_tensor = 0, same_seed = 0;
  for (size_t i = 0; i < n; ++i) {
    same_chunk += qkv[i] == qkv[n + i];
    same_tensor += qkv[i] == next[i];
    same_seed += qkv[i] == other_seed[i];
  }
  // Equal by chance: n pairs x a float's spacing near 0.02 (~2e-9) x the density (~20): ~0.003
  // expected. A repeated stream gives all n.
  EXPECT_LT(same_chunk, 16);
  EXPECT_LT(same_tensor, 16);
  EXPECT_LT(same_seed, 16);
}

TEST(ModelInit, StreamsRefusedPastTheirRange) {
  EXPECT_EQ(rng_stream::param_init_stream(3, 2), rng_stream::kParamInit + (3ull << 20) + 2);
  EXPECT_THROW(rng_stream::param_init_stream(1ull << 20, 0), Error);
  EXPECT_THROW(rng_stream::param_init_stream(0, 1ull << 20), Error);
}
