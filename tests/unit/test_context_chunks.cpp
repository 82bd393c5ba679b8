// Context parallelism's chunks: which positions each cp rank holds, and the tokens it takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "mpitrain/parallel/context_chunks.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

// The example in context_chunks.hpp: T 8, CP 2.
TEST(ContextChunks, TwoRanksAsDocumented) {
  const ContextChunks c(8, 2, 0);
  EXPECT_EQ(c.local_len(), 4);
  EXPECT_EQ(c.positions(0), (std::vector<int>{0, 1, 6, 7}));
  EXPECT_EQ(c.positions(1), (std::vector<int>{2, 3, 4, 5}));
}

// Every position is held once, and under the causal mask every rank attends to the same number
// of (query, key) pairs: the load balance.
TEST(ContextChunks, RanksCoverTheSequenceOnceWithEqualCausalWork) {
  for (int cp : {1, 2, 3, 4}) {
    const int T = 2 * cp * 5;
    const ContextChunks c(T, cp, 0);
    std::vector<int> all;
    long work0 = -1;
    for (int r = 0; r < cp; ++r) {
      const std::vector<int> pos = c.positions(r);
      all.insert(all.end(), pos.begin(), pos.end());
      const long work = std::accumulate(pos.begin(), pos.end(), 0L) + static_cast<long>(pos.size());
      if (r == 0) work0 = work;
      EXPECT_EQ(work, work0) << "cp " << cp << " rank " << r;
    }
    std::sort(all.begin(), all.end());
    std::vector<int> expected(T);
    std::iota(expected.begin(), expected.end(), 0);
    EXPECT_EQ(all, expected) << "cp " << cp;
  }
}

TEST(ContextChunks, TakeCutsEachSequenceIntoTheRanksChunks) {
  const int T = 12, cp = 3, rows = 2;
  std::vector<int32_t> full(rows * T);
  std::iota(full.begin(), full.end(), 100);  // token = 100 + row * T + position
  for (int r = 0; r < cp; ++r) {
    const ContextChunks c(T, cp, r);
    std::vector<int32_t> local(rows * c.local_len());
    c.take(full.data(), local.data(), rows);
    const std::vector<int> pos = c.positions();
    for (int b = 0; b < rows; ++b)
      for (int t = 0; t < c.local_len(); ++t)
        EXPECT_EQ(local[b * c.local_len() + t], 100 + b * T + pos[t]) << "rank " << r;
  }
}

TEST(ContextChunks, SeqLenNotDivisibleByTwiceCpIsAUsageError) {
  EXPECT_THROW(ContextChunks(10, 2, 0), UsageError);
  EXPECT_THROW(ContextChunks(6, 2, 1), UsageError);
  EXPECT_NO_THROW(ContextChunks(8, 2, 1));
}
