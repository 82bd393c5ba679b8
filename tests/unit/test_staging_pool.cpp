// The staging pool of ZeRO-2/3's started calls under --comm mpi on GPUs without CUDA-aware MPI
// (train/comm_groups.hpp sharded_call_stages): one buffer per unit buffer a call can run on, not
// 1 + 2 x units buffers of the largest unit. GPT-2 small (124M), whole stage, counted by hand:
// a block is 12 C^2 + 13 C floats, wte V' x C (V' = 50304, padded), wpe 1024 x C, lnf 2 C.
#include <gtest/gtest.h>

#include <numeric>

#include "mpitrain/train/comm_groups.hpp"

using namespace mpitrain;

namespace {

constexpr size_t C = 768, kBlock = 12 * C * C + 13 * C, kWte = 50304 * C, kWpe = 1024 * C,
                 kLnf = 2 * C, kLayers = 12;

ModelConfig gpt2_small() {
  ModelConfig c;
  c.arch = Arch::Gpt2;
  c.n_layer = 12;
  c.n_head = 12;
  c.n_kv_head = 12;
  c.d_model = 768;
  c.d_ff = 3072;
  c.vocab_size = 50257;
  c.max_seq_len = 1024;
  return c;
}

size_t sum(const std::vector<size_t>& v) { return std::accumulate(v.begin(), v.end(), size_t{0}); }

// The pool before: 2 x units buffers of the largest unit (wte), fp32.
constexpr size_t kOldPool = 2 * (kLayers + 3) * 4 * kWte;

}  // namespace

TEST(StagingPool, Gpt2SmallLayout) {  // the hand counts are the layout's
  const ParamLayout layout(gpt2_small());
  EXPECT_EQ(layout.units().size(), kLayers + 3);  // wte, wpe, 12 blocks, lnf (lm_head tied)
  EXPECT_EQ(layout.total(), kWte + kWpe + kLayers * kBlock + kLnf);
}

// ZeRO-3, fp32, resharded, prefetch: the gradient buffers (wte, wpe, lnf, two blocks) and as many
// parameter buffers: 10 buffers, 2 x 214 MB = 428 MB instead of 31 x 155 MB = 4.8 GB.
TEST(StagingPool, Zero3HoldsTheUnitBuffers) {
  const ParamLayout layout(gpt2_small());
  const std::vector<size_t> stages = sharded_call_stages(layout, {3, Precision::Fp32, true, true});
  const std::vector<size_t> each = {4 * kLnf,   4 * kLnf,   4 * kWpe,   4 * kWpe, 4 * kBlock,
                                    4 * kBlock, 4 * kBlock, 4 * kBlock, 4 * kWte, 4 * kWte};
  EXPECT_EQ(stages, each);
  EXPECT_EQ(sum(stages), 8 * (kWte + kWpe + kLnf + 2 * kBlock));  // 428 MB
  EXPECT_LT(sum(stages) * 10, kOldPool);
  // Without prefetch one block's parameter buffer; in bf16 the gathers stage 2 bytes an element.
  const std::vector<size_t> bf16 = sharded_call_stages(layout, {3, Precision::Bf16, false, true});
  EXPECT_EQ(bf16.size(), 9u);
  EXPECT_EQ(sum(bf16), 4 * (kWte + kWpe + kLnf + 2 * kBlock) + 2 * (kWte + kWpe + kLnf + kBlock));
  // Kept gathered: every unit's gather may be in flight (each has its place).
  const std::vector<size_t> kept = sharded_call_stages(layout, {3, Precision::Fp32, true, false});
  EXPECT_EQ(kept.size(), 5u + kLayers + 3);
  EXPECT_EQ(sum(kept), 4 * (kWte + kWpe + kLnf + 2 * kBlock) + 4 * layout.total());
}

// ZeRO-2, fp32: the update's gathers of every unit reuse the reduce-scatters' buffers (those are
// waited for first): 15 buffers, the stage's 498 MB; bf16: 5 fp32 and 15 2-byte ones.
TEST(StagingPool, Zero2HoldsTheStageOnce) {
  const ParamLayout layout(gpt2_small());
  const std::vector<size_t> fp32 = sharded_call_stages(layout, {2, Precision::Fp32, true, true});
  EXPECT_EQ(fp32.size(), kLayers + 3);
  EXPECT_EQ(sum(fp32), 4 * layout.total());
  EXPECT_LT(sum(fp32) * 9, kOldPool);
  const std::vector<size_t> bf16 = sharded_call_stages(layout, {2, Precision::Bf16, true, true});
  EXPECT_EQ(bf16.size(), 5u + kLayers + 3);
  EXPECT_EQ(sum(bf16), 4 * (kWte + kWpe + kLnf + 2 * kBlock) + 2 * layout.total());
}

// data_call_sizes at dp 2: the shard group's started calls are these, its blocking buffer the
// largest unit; ZeRO-0/1 keep a buffer per bucket.
TEST(StagingPool, DataCallSizesTakeThem) {
  const ModelConfig c = gpt2_small();
  const ParamLayout layout(c);
  const DataCallSizes z3 = data_call_sizes(c, ModelShard{}, 4, 1024, 1, 25.0, {3});
  EXPECT_EQ(z3.dp, 4 * kWte);
  EXPECT_EQ(z3.dp_started, sharded_call_stages(layout, {3}));
  const DataCallSizes z1 = data_call_sizes(c, ModelShard{}, 4, 1024, 1, 25.0, {1});
  EXPECT_EQ(z1.dp, 25u << 20);
  EXPECT_EQ(z1.dp_started.size(), (4 * layout.total() + (25u << 20) - 1) / (25u << 20));
}
