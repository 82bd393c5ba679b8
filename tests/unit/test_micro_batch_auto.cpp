// --micro-batch-size auto: the chosen micro-batch fits, the next larger divisor does not, and
// the plan says so; against the planner's memory model, which test_planner.cpp checks against
// what Model allocates.
#include <gtest/gtest.h>

#include "mpitrain/planner/micro_batch_auto.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

ModelConfig small_gpt2() {  // L4 H4 C64, vocabulary 256, 128 positions
  ModelConfig c;
  c.arch = Arch::Gpt2;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.d_model = 64;
  c.d_ff = 256;
  c.vocab_size = 256;
  c.max_seq_len = 128;
  return c;
}

RunShape gpu_run() {  // 24 sequences of 128 tokens per step, bf16 on a GPU
  RunShape r;
  r.seq_len = 128;
  r.global_batch = 24;
  r.precision = Precision::Bf16;
  r.gpu = true;
  return r;
}

double bytes_at(const RunShape& run, Layout layout, int b) {
  layout.micro_batch = b;
  return layout_memory(small_gpt2(), run, layout, 0.0).total();
}

}  // namespace

TEST(MicroBatchAuto, PicksTheLargestDivisorThatFits) {
  const RunShape run = gpu_run();
  Layout layout;
  layout.dp = 2;  // 12 sequences per rank: candidates 12, 6, 4, 3, 2, 1
  // Room for 4 but not for 6 (with a 10% margin).
  const double free = (bytes_at(run, layout, 4) + bytes_at(run, layout, 6)) / 2 / 0.9;
  const MicroBatchPlan plan = plan_micro_batch(small_gpt2(), run, layout, free, 0.10);
  EXPECT_EQ(plan.micro_batch, 4);
  EXPECT_DOUBLE_EQ(plan.memory.total(), bytes_at(run, layout, 4));
  EXPECT_NE(plan.text.find("mb 12: "), std::string::npos) << plan.text;
  EXPECT_NE(plan.text.find("mb 6: "), std::string::npos) << plan.text;
  EXPECT_NE(plan.text.find("fits -> micro-batch 4"), std::string::npos) << plan.text;
  EXPECT_EQ(plan.text.find("mb 5"), std::string::npos) << plan.text;  // not a divisor
}

TEST(MicroBatchAuto, EverythingFitsOrNothingFits) {
  const RunShape run = gpu_run();
  Layout layout;
  EXPECT_EQ(plan_micro_batch(small_gpt2(), run, layout, 1e12).micro_batch, 24);
  const MicroBatchPlan none = plan_micro_batch(small_gpt2(), run, layout, 1e5);
  EXPECT_EQ(none.micro_batch, 0);
  EXPECT_NE(none.text.find("none fits"), std::string::npos) << none.text;
}

TEST(MicroBatchAuto, RecomputeAndZeroLetALargerMicroBatchFit) {
  const RunShape run = gpu_run();
  Layout plain;
  plain.dp = 2;
  const double free = bytes_at(run, plain, 3) / 0.9;  // exactly room for 3 without savers
  EXPECT_EQ(plan_micro_batch(small_gpt2(), run, plain, free).micro_batch, 3);
  Layout saver = plain;
  saver.recompute = Recompute::Full;
  saver.zero = 1;
  EXPECT_GT(plan_micro_batch(small_gpt2(), run, saver, free).micro_batch, 3);
}

// ZeRO-3 holds a quarter of the parameters, gradients and optimizer state at dp 4 (plus the
// gathered units): the memory ZeRO-1 needs at one micro-batch leaves ZeRO-3 room for a larger one,
// and the plan's figure is the memory model's at ZeRO-3.
TEST(MicroBatchAuto, ZeroThreeLetsALargerMicroBatchFit) {
  const RunShape run = gpu_run();
  ModelConfig c = small_gpt2();  // 16 layers of C256: parameters weigh against activations
  c.n_layer = 16;
  c.d_model = 256;
  c.d_ff = 1024;
  Layout one;
  one.dp = 4;  // 6 sequences per rank: candidates 6, 3, 2, 1
  one.zero = 1;
  Layout three = one;
  three.zero = 3;
  auto need = [&](Layout layout, int b) {
    layout.micro_batch = b;
    return layout_memory(c, run, layout, 0.0).total();
  };
  const double free = need(one, 2) / 0.9;
  ASSERT_LT(need(three, 3), free * 0.9);  // the premise: ZeRO-3's saving exceeds a 3rd sequence
  EXPECT_EQ(plan_micro_batch(c, run, one, free).micro_batch, 2);
  const MicroBatchPlan plan = plan_micro_batch(c, run, three, free);
  EXPECT_EQ(plan.micro_batch, 3);
  EXPECT_DOUBLE_EQ(plan.memory.total(), need(three, 3));
}

TEST(MicroBatchAuto, RejectsABatchThatDpDoesNotDivide) {
  Layout layout;
  layout.dp = 5;
  EXPECT_THROW(plan_micro_batch(small_gpt2(), gpu_run(), layout, 1e12), UsageError);
  EXPECT_THROW(plan_micro_batch(small_gpt2(), gpu_run(), Layout{}, 1e12, 1.0), Error);
}

// Sequence parallelism shrinks the activations of a tp 2 rank, so auto may pick a larger
// micro-batch on the same memory: room for 6 with it, between its 6 and the 6 without.
TEST(MicroBatchAuto, SequenceParallelismMakesRoomForMore) {
  const RunShape run = gpu_run();
  Layout layout;
  layout.tp = 2;  // 24 sequences per rank: candidates 24, 12, 8, 6, 4, ...
  Layout sp = layout;
  sp.sequence_parallel = true;
  ASSERT_LT(bytes_at(run, sp, 6), bytes_at(run, layout, 6));
  const double free = (bytes_at(run, sp, 6) + bytes_at(run, layout, 6)) / 2 / 0.9;
  ASSERT_GT(bytes_at(run, sp, 8), free * 0.9) << "the test's sizes: sp at 8 must not fit";
  EXPECT_EQ(plan_micro_batch(small_gpt2(), run, layout, free, 0.10).micro_batch, 4);
  EXPECT_EQ(plan_micro_batch(small_gpt2(), run, sp, free, 0.10).micro_batch, 6);
}
