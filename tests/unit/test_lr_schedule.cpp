#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "mpitrain/optim/lr_schedule.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

TEST(LrSchedule, WarmupThenCosineToMin) {
  LrSchedule s{LrDecay::Cosine, 1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);        // decay starts at max
  // progress p = (step - warmup) / (total - warmup - 1)
  EXPECT_NEAR(s.at(8), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 4 / 9.0)), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(13), 0.1);       // last step reaches min
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin{LrDecay::Linear, 2.0, 0.0, 0, 5};
  EXPECT_DOUBLE_EQ(lin.at(0), 2.0);
  EXPECT_DOUBLE_EQ(lin.at(2), 1.0);
  EXPECT_DOUBLE_EQ(lin.at(4), 0.0);
  LrSchedule c{LrDecay::Constant, 0.5, 0.0, 2, 10};
  EXPECT_DOUBLE_EQ(c.at(0), 0.25);
  EXPECT_DOUBLE_EQ(c.at(9), 0.5);
}

TEST(LrSchedule, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_lr_decay("linear"), LrDecay::Linear);
  EXPECT_THROW(parse_lr_decay("step"), UsageError);
}
