// The parts of a stage's flat parameter buffer that one rank holds, kept back to back.
//
// Every buffer that covers only part of the flat buffer (the optimizer's master and state, and
// under ZeRO-2/3 the gradient and parameter shards) is "compact": the ranges' elements in order,
// with no gaps. Flat offset f of range i sits at compact offset at(i) + (f - ranges()[i].lo).
//   whole(n)        no ZeRO: one range [0, n), compact = flat
//   ZeRO-1          one range [lo, hi): compact = flat - lo
//   ZeRO-2 / 3      one range per unit (ParamLayout::units()): this rank's piece of the unit
//                   (ZeRO-3: the unit's zero_range; ZeRO-2: the unit's part of ZeRO-1's range)
//   with --ep       ZeRO-1/2: zero_owned's ranges; ZeRO-3: a piece per segment of a unit (the
//                   expert ranges split over expert-dp, the rest over the shard group)
// Example, ZeRO-3, units [0, 40) and [40, 100), 2 ranks, pieces rounded up to 16 elements: rank 0
// holds [0, 32) [40, 72) (compact 0..31, 32..63), rank 1 [32, 40) [72, 100) (compact 0..7, 8..35).
// A tensor lies in one unit, so it meets at most one range (overlap()).
#pragma once

#include <cstddef>
#include <vector>

namespace mpitrain {

struct FlatRange {
  size_t lo = 0, hi = 0;  // [lo, hi)
  size_t size() const { return hi - lo; }
  bool operator==(const FlatRange&) const = default;
};

// The split of n elements over `ranks`: pieces of ceil(n / ranks) rounded up to 16 elements, in
// rank order; the last pieces may be shorter or empty (ZeRO-1's ranges, ZeRO-2/3's unit pieces).
FlatRange zero_range(size_t n, int ranks, int rank);

// Expert parallelism (--ep > 1) under ZeRO: the ep-split expert ranges hold different experts on
// different ep ranks, so they are split over the expert-data-parallel group, the rest over the
// shard group. segments: ascending, disjoint flat ranges read as one sequence; part: a range of
// that sequence. The flat ranges `part` covers, ascending, adjacent ones joined. Example,
// segments [0, 10) [20, 30), part [5, 15): [5, 10) [20, 25).
std::vector<FlatRange> flat_ranges_of(const std::vector<FlatRange>& segments, FlatRange part);
// [0, n) less the ascending, disjoint `holes` (those from n on ignored): the dense segments
// around the expert ranges.
std::vector<FlatRange> complement(size_t n, const std::vector<FlatRange>& holes);
// A part of the flat buffer, and whether it is (in) an expert range: its group is expert-dp.
struct GroupSpan {
  FlatRange range;
  bool expert = false;
};
// unit cut at the edges of the expert ranges inside it, ascending: ZeRO-2/3's segments of a
// unit. Error if an expert range crosses the unit's edge. Example, unit [0, 100), experts
// [20, 40) [40, 70): [0, 20) dense, [20, 40) [40, 70) expert, [70, 100) dense.
std::vector<GroupSpan> cut_at_experts(FlatRange unit, const std::vector<FlatRange>& experts);
// ZeRO-1/2 ownership: rank (dense_rank, expert_rank) owns zero_range(dense elements, dense_ranks,
// dense_rank) of the elements outside `experts` and zero_range(expert elements, expert_ranks,
// expert_rank) of those inside, each read as one sequence; ascending flat ranges, adjacent ones
// joined. Without experts: {zero_range(n, dense_ranks, dense_rank)}, ZeRO-1's one range.
std::vector<FlatRange> zero_owned(size_t n, const std::vector<FlatRange>& experts,
                                  int dense_ranks, int dense_rank, int expert_ranks,
                                  int expert_rank);

class ShardRanges {
 public:
  ShardRanges() = default;
  // Sorted, disjoint ranges; empty ones are dropped. Error if they overlap or are out of order.
  explicit ShardRanges(std::vector<FlatRange> ranges);
  static ShardRanges whole(size_t n) { return ShardRanges({{0, n}}); }

  const std::vector<FlatRange>& ranges() const { return ranges_; }
  size_t size() const { return size_; }         // elements held
  size_t at(size_t i) const { return at_[i]; }  // compact offset of range i
  // The part of [lo, hi) that is held, with its compact offset (begin == end: none). Error if
  // more than one range meets [lo, hi).
  struct Overlap {
    size_t begin = 0, end = 0, at = 0;  // flat [begin, end) at compact [at, at + end - begin)
    size_t size() const { return end - begin; }
  };
  Overlap overlap(size_t lo, size_t hi) const;

 private:
  std::vector<FlatRange> ranges_;
  std::vector<size_t> at_;
  size_t size_ = 0;
};

}  // namespace mpitrain
