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

std::vector<FlatRange> flat_ranges_of(const std::vector<FlatRange>& segments, FlatRange part) {
  std::vector<FlatRange> out;
  size_t before = 0;  // elements of the sequence before segment s
  for (const FlatRange& s : segments) {
    const size_t lo = std::max(part.lo, before), hi = std::min(part.hi, before + s.size());
    if (lo < hi) {
      const FlatRange r{s.lo + (lo - before), s.lo + (hi - before)};
      if (!out.empty() && out.back().hi == r.lo) out.back().hi = r.hi;
      else out.push_back(r);
    }
    before += s.size();
  }
  return out;
}

std::vector<FlatRange> complement(size_t n, const std::vector<FlatRange>& holes) {
  std::vector<FlatRange> out;
  size_t from = 0;
  for (const FlatRange& h : holes) {
    if (h.lo >= n) break;
    if (h.lo > from) out.push_back({from, h.lo});
    from = h.hi;
  }
  if (n > from) out.push_back({from, n});
  return out;
}

std::vector<GroupSpan> cut_at_experts(FlatRange unit, const std::vector<FlatRange>& experts) {
  std::vector<GroupSpan> spans;
  for (const FlatRange& d : complement(unit.hi, experts))
    if (d.hi > unit.lo) spans.push_back({{std::max(d.lo, unit.lo), d.hi}, false});
  for (const FlatRange& e : experts)
    if (e.lo >= unit.lo && e.hi <= unit.hi) spans.push_back({e, true});
  std::sort(spans.begin(), spans.end(),
            [](const GroupSpan& a, const GroupSpan& b) { return a.range.lo < b.range.lo; });
  size_t covered = 0;
  for (const GroupSpan& span : spans) covered += span.range.size();
  if (covered != unit.size())
    MPITRAIN_THROW("the unit [" + std::to_string(unit.lo) + ", " + std::to_string(unit.hi) +
                   "): an expert range crosses its edge");
  return spans;
}

std::vector<FlatRange> zero_owned(size_t n, const std::vector<FlatRange>& experts,
                                  int dense_ranks, int dense_rank, int expert_ranks,
                                  int expert_rank) {
  const std::vector<FlatRange> dense = complement(n, experts);
  size_t n_dense = 0, n_experts = 0;
  for (const FlatRange& r : dense) n_dense += r.size();
  for (const FlatRange& r : experts) n_experts += r.size();
  std::vector<FlatRange> out = flat_ranges_of(dense, zero_range(n_dense, dense_ranks, dense_rank));
  const std::vector<FlatRange> mine =
      flat_ranges_of(experts, zero_range(n_experts, expert_ranks, expert_rank));
  out.insert(out.end(), mine.begin(), mine.end());
  std::sort(out.begin(), out.end(),
            [](const FlatRange& a, const FlatRange& b) { return a.lo < b.lo; });
  std::vector<FlatRange> joined;
  for (const FlatRange& r : out)
    if (!joined.empty() && joined.back().hi == r.lo) joined.back().hi = r.hi;
    else joined.push_back(r);
  return joined;
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
