// A rank's memory budget on a GPU that several ranks of a node share (planner/micro_batch_auto.hpp
// device_share): the free memory divided among them, less each one's workspace; never negative.
#include <gtest/gtest.h>

#include "mpitrain/planner/micro_batch_auto.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {
constexpr double GiB = 1 << 30;
}

TEST(DeviceShare, DividesTheFreeMemoryAmongTheRanksOnTheGpu) {
  EXPECT_EQ(device_share(80 * GiB, 1, 1 * GiB), 79 * GiB);  // a GPU of its own: as before
  EXPECT_EQ(device_share(80 * GiB, 4, 1 * GiB), 19 * GiB);  // 4 ranks: 20 GiB each, less 1
  EXPECT_EQ(device_share(80 * GiB, 8, 0.0), 10 * GiB);      // --micro-batch-size auto: no reserve
  EXPECT_EQ(device_share(3 * GiB, 4, 1 * GiB), 0.0);        // less than the workspaces: nothing
}

TEST(DeviceShare, RefusesNoRanks) { EXPECT_THROW(device_share(80 * GiB, 0, 0.0), Error); }
