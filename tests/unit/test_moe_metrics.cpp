// A step's MoE records from the stage's statistics (train/moe_metrics.hpp): every MoE layer of
// the model in order, this stage's filled in, the losses the mean over the step's micro-batches,
// nothing added by a rank that does not count (tp rank > 0).
#include <gtest/gtest.h>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/train/moe_metrics.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;

TEST(MoeMetrics, EveryMoeLayerInOrderWithTheStagesStatistics) {
  mpitrain::test::start_mpi();
  MpiCommunicator self(MPI_COMM_SELF);
  ModelConfig c;
  c.set_arch(Arch::Llama);
  c.n_layer = 6;
  c.n_experts = 3;
  c.moe_every = 2;  // layers 1, 3, 5
  // A stage of layers 2..5 after 4 micro-batches of 10 rows, top-2: 80 assignments a layer.
  const std::vector<MoeLayerStats> stage = {{3, 8.0, 2.0, {30, 20, 30}, 40},
                                            {5, 12.0, 4.0, {80, 0, 0}, 40}};
  const std::vector<MoeLayerRecord> r = reduce_moe_stats(stage, c, true, 4, self);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].layer, 1);
  EXPECT_EQ(r[0].tokens, (std::vector<int64_t>{0, 0, 0}));  // another stage's: none here
  EXPECT_EQ(r[1].layer, 3);
  EXPECT_DOUBLE_EQ(r[1].aux_loss, 2.0);  // 8 / 4 micro-batches
  EXPECT_DOUBLE_EQ(r[1].z_loss, 0.5);
  EXPECT_EQ(r[1].tokens, (std::vector<int64_t>{30, 20, 30}));
  EXPECT_EQ(r[2].layer, 5);
  EXPECT_DOUBLE_EQ(r[2].aux_loss, 3.0);
  EXPECT_DOUBLE_EQ(r[2].imbalance(), 3.0);  // 80 / (80 / 3)
  for (const MoeLayerRecord& l : reduce_moe_stats(stage, c, false, 4, self)) {
    EXPECT_EQ(l.aux_loss, 0.0);
    EXPECT_EQ(l.tokens, (std::vector<int64_t>{0, 0, 0}));
  }
}
