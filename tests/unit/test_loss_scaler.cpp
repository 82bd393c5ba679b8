// Dynamic loss scaling follows PyTorch's GradScaler: halve and skip on overflow, double after
// `window` clean steps, never below the minimum.
#include <gtest/gtest.h>

#include "mpitrain/optim/loss_scaler.hpp"

using namespace mpitrain;

TEST(LossScaler, GrowsAfterWindowAndHalvesOnOverflow) {
  LossScaler s({true, 65536.0, 3, 1.0});
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_TRUE(s.update(false));  // third clean step: doubles
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));  // overflow: skip, halve, clean count restarts
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.clean_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
}

TEST(LossScaler, NeverBelowMinimum) {
  LossScaler s({true, 4.0, 2000, 1.0});
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.skipped_steps(), 5);
}

TEST(LossScaler, DisabledKeepsScaleOneAndCountsNothing) {
  LossScaler s({false, 65536.0, 1, 1.0});
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_TRUE(s.update(false));
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScaler, RestoresCheckpointedState) {
  LossScaler s({true, 65536.0, 2, 1.0});
  s.restore(1024.0, 1, 7);
  EXPECT_TRUE(s.update(false));  // completes the window begun before the checkpoint
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.skipped_steps(), 7);
}
