// Peak RSS from /proc/self/status.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "mpitrain/monitor/memory.hpp"

using namespace mpitrain;

TEST(PeakRss, CoversMemoryTouched) {
  const double before = peak_rss_mib();
  EXPECT_GT(before, 1.0);
  const size_t bytes = size_t{256} << 20;
  std::unique_ptr<char[]> block(new char[bytes]);
  std::memset(block.get(), 1, bytes);
  volatile long sink = 0;  // the pages are really touched: read them back
  for (size_t i = 0; i < bytes; i += 4096) sink = sink + block[i];
  EXPECT_EQ(sink, static_cast<long>(bytes / 4096));
  const double after = peak_rss_mib();
  EXPECT_GE(after, 256.0);
  EXPECT_GE(after, before);
  block.reset();
  // A high-water mark: freeing the block does not take its 256 MiB off (the kernel's RSS counters
  // are approximate by a few pages per thread).
  EXPECT_GT(peak_rss_mib(), after - 8.0);
}
