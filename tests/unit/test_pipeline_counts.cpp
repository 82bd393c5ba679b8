// The all-layers aux loss's routing counts in a pipeline's float messages
// (train/pipeline_runner.hpp): every count below 2^46 comes back exactly, where one float alone
// loses counts above 2^24 (a micro-batch of 8 x 4096 rows, top-8, over 48 MoE layers routes
// 12.6M: within reach).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mpitrain/train/pipeline_runner.hpp"

using namespace mpitrain;

TEST(PipelineCounts, EveryCountBelow2To46ComesBackExactly) {
  const std::vector<int64_t> counts = {0,
                                       1,
                                       (int64_t{1} << 22) - 1,
                                       int64_t{1} << 22,
                                       (int64_t{1} << 24) + 1,
                                       12582913,
                                       (int64_t{1} << 40) + 12345,
                                       (int64_t{1} << 46) - 1};
  std::vector<float> message(2 * counts.size());
  PipelineRunner::encode_counts(counts, message.data());
  std::vector<int64_t> back(counts.size(), -7);
  PipelineRunner::decode_counts(message.data(), back, false);
  EXPECT_EQ(back, counts);
  PipelineRunner::decode_counts(message.data(), back, true);  // added
  for (size_t e = 0; e < counts.size(); ++e) EXPECT_EQ(back[e], 2 * counts[e]) << e;
}
