// The memory check before any allocation: a small model fits, an oversized one is refused with
// its plan per part and what would fit, and absurd sizes give finite figures
// (no int overflow, no listing of 2^28 layers, which would not end); shard_params and
// stage_units agree with ParamLayout and its units.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "mpitrain/model/params.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"
#include "mpitrain/planner/memory_fit.hpp"
#include "mpitrain/train/gather.hpp"

using namespace mpitrain;

namespace {

ModelConfig model(Arch arch, int n_layer, int d_model) {
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = n_layer;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::Llama ? 2 : 4;
  c.d_model = d_model;
  c.d_ff = default_ffn_width(arch, d_model);
  c.vocab_size = 256;
  c.max_seq_len = 64;
  return c;
}

RunShape cpu_run(int global_batch) {
  RunShape r;
  r.seq_len = 64;
  r.global_batch = global_batch;
  return r;
}

std::string misfit(const ModelConfig& c, const RunShape& run, const Layout& layout, double bytes) {
  return memory_misfit(c, run, layout, pipeline_layer_split(c.n_layer, layout.pp, ""), bytes,
                       "test budget");
}

constexpr double kGiB = 1 << 30;

}  // namespace

TEST(MemoryFit, ShardParamsAgreesWithTheLayout) {
  for (Arch arch : {Arch::Gpt2, Arch::Llama}) {
    const ModelConfig c = model(arch, 5, 64);
    const GridShape grid{1, 2, 2};
    const std::vector<int> first = pipeline_layer_split(c.n_layer, grid.pp, "");
    for (int stage = 0; stage < grid.pp; ++stage)
      for (int tp_rank = 0; tp_rank < grid.tp; ++tp_rank) {
        const ModelShard s = shard_of(grid, first, tp_rank, stage);
        const ParamLayout layout(c, s);
        EXPECT_EQ(shard_params(c, s), static_cast<double>(layout.total()));
        // ZeRO-2/3's units: the pieces each rank of 3 holds at most, and the largest unit.
        double pieces = 0, largest = 0;
        for (const FlatRange& unit : layout.units()) {
          pieces += zero_range(unit.size(), 3, 0).size();
          largest = std::max(largest, static_cast<double>(unit.size()));
        }
        const StageUnits units = stage_units(c, s, 3);
        EXPECT_EQ(units.shard(), pieces);
        EXPECT_EQ(units.largest, largest);
        EXPECT_EQ(units.units(), static_cast<int>(layout.units().size()));
      }
    EXPECT_EQ(shard_params(c, ModelShard{}), static_cast<double>(ParamLayout(c).total()));
  }
}

TEST(MemoryFit, ASmallModelFits) {
  EXPECT_EQ(misfit(model(Arch::Gpt2, 2, 64), cpu_run(8), Layout{1, 1, 1, 2}, kGiB), "");
  EXPECT_EQ(misfit(model(Arch::Gpt2, 2, 64), cpu_run(8), Layout{1, 1, 1, 0}, kGiB), "");  // auto
}

TEST(MemoryFit, TooLargeAMicroBatchNamesOneThatFits) {
  const ModelConfig c = model(Arch::Gpt2, 2, 64);
  Layout at8{1, 1, 1, 8};
  Layout at1{1, 1, 1, 1};
  const double need8 = layout_memory(c, cpu_run(8), at8, 0).total();
  const double need1 = layout_memory(c, cpu_run(8), at1, 0).total();
  ASSERT_LT(need1, need8);
  const std::string text = misfit(c, cpu_run(8), at8, (need1 + need8) / 2);
  EXPECT_NE(text.find("does not fit in memory"), std::string::npos) << text;
  EXPECT_NE(text.find("at micro-batch 8 (params "), std::string::npos) << text;
  EXPECT_NE(text.find("activations"), std::string::npos) << text;
  EXPECT_NE(text.find("--micro-batch-size "), std::string::npos) << text;
  EXPECT_NE(text.find("test budget"), std::string::npos) << text;
}

TEST(MemoryFit, AHugeModelSaysHowManyTimesTheMemory) {
  const std::string text =
      misfit(model(Arch::Llama, 2, 1000000), cpu_run(8), Layout{1, 1, 1, 2}, 8 * kGiB);
  EXPECT_NE(text.find("does not fit"), std::string::npos) << text;
  EXPECT_NE(text.find("even micro-batch 1 needs"), std::string::npos) << text;
  EXPECT_NE(text.find("GiB"), std::string::npos) << text;
  EXPECT_NE(text.find("times the tp x pp ranks (now 1 x 1)"), std::string::npos) << text;
  EXPECT_NE(misfit(model(Arch::Gpt2, 2, 64), cpu_run(8), Layout{1, 1, 1, 0}, 1e3)
                .find("micro-batch-size auto: none fits"),
            std::string::npos);
}

TEST(MemoryFit, AbsurdSizesGiveFiniteFiguresAtOnce) {
  ModelConfig c = model(Arch::Llama, 1 << 28, 1 << 28);
  c.d_ff = c.vocab_size = c.max_seq_len = 1 << 28;
  const std::string text = misfit(c, cpu_run(1 << 24), Layout{1, 1, 4, 1 << 20}, 8 * kGiB);
  EXPECT_NE(text.find("does not fit"), std::string::npos) << text;
  EXPECT_EQ(text.find("inf"), std::string::npos) << text;
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
}
