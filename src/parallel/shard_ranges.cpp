#include "mpitrain/parallel/shard_ranges.hpp"

#include <algorithm>
#include <string>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

FlatRange zero_range(size_t n, int ranks, int rank) {
  const size_t per = ((n + ranks - 1) / ranks + 15) / 16 * 16;
  const size_t lo = std::min(n, static_cast<size_t>(rank) * per);
  return {lo, std::min(n, lo + per)};
}

ShardRanges::ShardRanges(std::vector<FlatRange> ranges) {
  for (const FlatRange& r : ranges) {
    if (r.hi <= r.lo) continue;
    if (!ranges_.empty() && r.lo < ranges_.back().hi)
      MPITRAIN_THROW("shard ranges overlap or are out of order at [" + std::to_string(r.lo) + ", " +
                     std::to_string(r.hi) + ")");
    ranges_.push_back(r);
    at_.push_back(size_);
    size_ += r.size();
  }
}

ShardRanges::Overlap ShardRanges::overlap(size_t lo, size_t hi) const {
  // The first range ending after lo; the next one must not start before hi.
  const auto it = std::upper_bound(ranges_.begin(), ranges_.end(), lo,
                                   [](size_t x, const FlatRange& r) { return x < r.hi; });
  if (it == ranges_.end() || it->lo >= hi) return {};
  if (it + 1 != ranges_.end() && (it + 1)->lo < hi)
    MPITRAIN_THROW("[" + std::to_string(lo) + ", " + std::to_string(hi) +
                   ") meets more than one shard range");
  const size_t begin = std::max(lo, it->lo), end = std::min(hi, it->hi);
  return {begin, end, at_[it - ranges_.begin()] + (begin - it->lo)};
}

}  // namespace mpitrain
