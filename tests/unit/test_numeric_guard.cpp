// The NaN guard on one rank: tensor statistics, finding the first non-finite gradient in the
// model's order, the skip / stop policy and its diagnostics file, the nan fault.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/train/numeric_guard.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.d_model = 8;
  c.d_ff = 16;
  c.vocab_size = 16;
  c.max_seq_len = 4;
  return c;
}

// A fresh empty directory under the test temp dir.
std::string scratch_dir(const std::string& name) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("numeric_guard_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

}  // namespace

TEST(TensorStats, CountsNonFiniteAndDescribesTheFiniteValues) {
  const std::vector<float> x = {1.0f, kNaN, -3.0f, kInf, 2.0f, -kInf, 4.0f, kNaN};
  const TensorStats s = tensor_stats(x.data(), {2, 4});
  EXPECT_EQ(s.count, 8u);
  EXPECT_EQ(s.nan, 2u);
  EXPECT_EQ(s.inf, 2u);
  EXPECT_EQ(s.min, -3.0);
  EXPECT_EQ(s.max, 4.0);
  EXPECT_DOUBLE_EQ(s.mean, 1.0);            // (1 - 3 + 2 + 4) / 4
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(6.5));  // (0 + 16 + 1 + 9) / 4
  EXPECT_EQ(describe(s),
            "shape [2, 4] f32, 2 NaN, 2 inf of 8; finite min -3 max 4 mean 1 std 2.54951");
  EXPECT_EQ(json_members(s),
            "\"shape\": [2, 4], \"dtype\": \"f32\", \"count\": 8, \"nan\": 2, \"inf\": 2, \"min\": "
            "-3, \"max\": 4, \"mean\": 1, \"std\": 2.54951");
  const std::vector<float> all_nan = {kNaN, kNaN};
  EXPECT_NE(json_members(tensor_stats(all_nan.data(), {2})).find("\"min\": null"),
            std::string::npos);
}

TEST(FindNonFinite, AllFiniteIsNotFound) {
  mpitrain::test::start_mpi();
  const ParamLayout layout(small_config());
  std::vector<float> grads(layout.total(), 0.5f);
  MpiCommunicator world(MPI_COMM_WORLD);
  const NonFinite r = find_nonfinite(layout, grads.data(), 2.5, world);
  EXPECT_FALSE(r.found);
  EXPECT_EQ(r.describe(), "all finite");
}

TEST(FindNonFinite, TheFirstTensorInTheModelsOrder) {
  mpitrain::test::start_mpi();
  const ParamLayout layout(small_config());
  std::vector<float> grads(layout.total(), 0.25f);
  // An inf in block 2's mlp.fc.weight and NaNs in block 1's attn.proj.weight: block 1 is first.
  grads[layout.offset(Slot::FcW, 2) + 3] = kInf;
  const ParamTensor& proj = layout.find("h.1.attn.proj.weight");
  grads[proj.offset + 5] = kNaN;
  grads[proj.offset + 6] = kNaN;
  MpiCommunicator world(MPI_COMM_WORLD);
  const NonFinite r = find_nonfinite(layout, grads.data(), 2.5, world);
  EXPECT_TRUE(r.found);
  EXPECT_FALSE(r.loss);
  EXPECT_EQ(r.rank, 0);
  EXPECT_EQ(r.tensor, "h.1.attn.proj.weight");
  EXPECT_EQ(r.layer, 1);
  EXPECT_EQ(r.global_index, proj.global_index);
  EXPECT_EQ(r.stats.shape, proj.shape);
  EXPECT_EQ(r.stats.nan, 2u);
  EXPECT_EQ(r.stats.inf, 0u);
  EXPECT_EQ(r.stats.count, proj.numel);
  EXPECT_EQ(r.stats.min, 0.25);
  EXPECT_EQ(r.stats.max, 0.25);
  EXPECT_EQ(r.stats.std, 0.0);
  EXPECT_EQ(r.describe(),
            "non-finite gradient: first in h.1.attn.proj.weight (block 1) on rank 0: shape [8, 8] "
            "f32, 2 NaN, 0 inf of 64; finite min 0.25 max 0.25 mean 0.25 std 0");
}

TEST(FindNonFinite, OnlyTheOwnRangeUnderZero) {
  mpitrain::test::start_mpi();
  // A ZeRO-1 rank owns [lo, hi) of the flat buffer; the rest holds other ranks' partial sums.
  const ParamLayout layout(small_config());
  std::vector<float> grads(layout.total(), 0.5f);
  const ParamTensor& fc = layout.find("h.0.mlp.fc.weight");
  const size_t lo = fc.offset + 10, hi = fc.offset + 20;
  grads[lo - 1] = kNaN;  // outside: not this rank's to judge
  grads[hi] = kNaN;
  MpiCommunicator world(MPI_COMM_WORLD);
  const ShardRanges own({{lo, hi}});  // compact: grads + lo
  EXPECT_FALSE(find_nonfinite(layout, grads.data() + lo, own, 1.0, world).found);
  grads[lo + 3] = kNaN;
  const NonFinite r = find_nonfinite(layout, grads.data() + lo, own, 1.0, world);
  EXPECT_TRUE(r.found);
  EXPECT_EQ(r.tensor, "h.0.mlp.fc.weight");
  EXPECT_EQ(r.stats.begin, 10u);
  EXPECT_EQ(r.stats.count, 10u);
  EXPECT_EQ(r.stats.nan, 1u);
  EXPECT_EQ(describe(r.stats),
            "shape [16, 8] f32, elements 10-19: 1 NaN, 0 inf of 10; finite min 0.5 max 0.5 mean "
            "0.5 std 0");
  EXPECT_NE(json_members(r.stats).find("\"elements\": [10, 20]"), std::string::npos);
}

TEST(FindNonFinite, ALossAlone) {
  mpitrain::test::start_mpi();
  const ParamLayout layout(small_config());
  std::vector<float> grads(layout.total(), 0.0f);
  MpiCommunicator world(MPI_COMM_WORLD);
  const NonFinite r = find_nonfinite(layout, grads.data(), std::nan(""), world);
  EXPECT_TRUE(r.found);
  EXPECT_TRUE(r.loss);
  EXPECT_EQ(r.rank, -1);
  EXPECT_EQ(r.describe(), "non-finite loss (every gradient finite)");
}

TEST(NumericGuard, ParsesThePolicy) {
  EXPECT_EQ(parse_nan_policy("skip"), NanPolicy::Skip);
  EXPECT_EQ(parse_nan_policy("stop"), NanPolicy::Stop);
  EXPECT_THROW(parse_nan_policy("ignore"), UsageError);
}

TEST(NumericGuard, SkipCountsTheStepsItSkips) {
  mpitrain::test::start_mpi();
  const ParamLayout layout(small_config());
  std::vector<float> grads(layout.total(), 1.0f);
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string dir = scratch_dir("skip");
  NumericGuard guard(NanPolicy::Skip, dir, world);
  EXPECT_EQ(guard.check(layout, grads.data(), 1.0, 1), StepVerdict::Update);
  grads[7] = kNaN;
  EXPECT_EQ(guard.check(layout, grads.data(), 1.0, 2), StepVerdict::Skip);
  EXPECT_EQ(guard.check(layout, grads.data(), kInf, 3), StepVerdict::Skip);
  EXPECT_EQ(guard.skipped(), 2);
  EXPECT_TRUE(fs::is_empty(dir));  // skipping writes no diagnostics
}

TEST(NumericGuard, StopWritesEveryNonFiniteTensorToJson) {
  mpitrain::test::start_mpi();
  const ParamLayout layout(small_config());
  std::vector<float> grads(layout.total(), 1.0f);
  grads[layout.offset(Slot::Wte) + 1] = -kInf;
  grads[layout.offset(Slot::LnfW)] = kNaN;
  MpiCommunicator world(MPI_COMM_WORLD);
  const std::string dir = scratch_dir("stop");
  NumericGuard guard(NanPolicy::Stop, dir, world);
  EXPECT_EQ(guard.check(layout, grads.data(), std::nan(""), 7), StepVerdict::Stop);
  std::ifstream in(fs::path(dir) / "nonfinite-step-7.json");
  ASSERT_TRUE(in) << "no diagnostics file";
  const nlohmann::json v = nlohmann::json::parse(in);  // throws on nan / inf
  EXPECT_EQ(v.at("step"), 7);
  EXPECT_EQ(v.at("loss_nonfinite"), true);
  EXPECT_EQ(v.at("first").at("tensor"), "wte");
  EXPECT_EQ(v.at("first").at("inf"), 1);
  const nlohmann::json& found = v.at("found");
  ASSERT_EQ(found.size(), 3u);  // the loss, wte, lnf.weight
  EXPECT_EQ(found[0].at("loss"), "nan");
  EXPECT_EQ(found[1].at("tensor"), "wte");
  EXPECT_EQ(found[2].at("tensor"), "lnf.weight");
  EXPECT_EQ(found[2].at("nan"), 1);
  EXPECT_EQ(found[2].at("min"), 1);
}

TEST(NanFault, PoisonsItsBlocksProjectionInItsStep) {
  if (!FaultPlan::kCompiledIn) GTEST_SKIP() << "fault injection is compiled out";
  const ParamLayout layout(small_config());
  std::vector<float> grads(layout.total(), 0.0f);
  const FaultPlan plan = FaultPlan::parse("nan:layer=2:step=4");
  const ShardRanges all = ShardRanges::whole(layout.total());
  apply_nan_fault(plan, layout, grads.data(), all, 0, 3);
  apply_nan_fault(FaultPlan(), layout, grads.data(), all, 0, 4);
  for (float g : grads) ASSERT_FALSE(std::isnan(g));
  apply_nan_fault(plan, layout, grads.data(), all, 0, 4);
  size_t nans = 0;
  for (float g : grads) nans += std::isnan(g);
  EXPECT_EQ(nans, 1u);
  EXPECT_TRUE(std::isnan(grads[layout.offset(Slot::ProjW, 2)]));
  // A stage without block 2 holds nothing to poison.
  const ParamLayout stage(small_config(), ModelShard{1, 0, 0, 2, true, false});
  std::vector<float> stage_grads(stage.total(), 0.0f);
  apply_nan_fault(plan, stage, stage_grads.data(), ShardRanges::whole(stage.total()), 0, 4);
  for (float g : stage_grads) ASSERT_FALSE(std::isnan(g));
  // Under ZeRO-2/3 the rank whose piece of block 2 holds the element, at its compact place.
  const size_t at = layout.offset(Slot::ProjW, 2);
  const ShardRanges piece({{0, 8}, {at, at + 4}});
  std::vector<float> shard(piece.size(), 0.0f);
  apply_nan_fault(plan, layout, shard.data(), piece, 0, 4);
  EXPECT_TRUE(std::isnan(shard[8]));
  const ShardRanges other({{at + 1, at + 4}});
  std::vector<float> none(other.size(), 0.0f);
  apply_nan_fault(plan, layout, none.data(), other, 0, 4);
  for (float g : none) ASSERT_FALSE(std::isnan(g));
}
