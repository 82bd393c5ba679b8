// The layout planner: every dp x tp x pp x cp grid of the cluster's ranks, with each micro-batch
// size, ZeRO 0-3, recomputation none/selective/full and sequence parallelism on/off; memory per
// rank and step time of each (memory.hpp, timing.hpp); the ones that fit ranked by step time, and
// for every grid that has no fitting option, why.
//
// A grid is possible when tp divides the ranks of a node (a tp group never spans nodes) and the
// model's heads, kv heads, d_ff and padded vocabulary (check_tensor_parallel, as the trainer),
// pp <= n_layer (the trainer's balanced split, uneven when pp does not divide n_layer), dp
// divides the global batch, and 2 cp divides seq-len (context_chunks.hpp). ZeRO
// shards over the gradients' group, dp x cp ranks; sequence parallelism needs T/cp divisible by
// tp. A layout fits when its largest stage holds at most usable_memory of a
// rank's memory (the margin --micro-batch-size auto keeps). Micro-batch sizes: the divisors of global batch / dp up to
// max_micro_batch. ZeRO 1-3 only where dp x cp > 1 (they change nothing otherwise); ZeRO-3 both with
// and without resharding after forward (without: faster, the stage's parameters held whole, so
// it wins where that memory is there); ZeRO-2/3 over the whole dp group, or over groups of
// SearchLimits::zero_shard (HSDP) on the grids whose dp it divides.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mpitrain/planner/cluster.hpp"
#include "mpitrain/planner/memory.hpp"
#include "mpitrain/planner/timing.hpp"

namespace mpitrain {

struct Candidate {
  Layout layout;
  MemoryEstimate memory;
  TimeEstimate time;
  double tokens_per_s = 0;
  double mfu = 0;  // model FLOPs (PaLM) per second over the peak of all ranks
};

struct Rejected {
  int dp, tp, pp;
  std::string reason;
  int cp = 1;
};

// Restricts the search; 0 / empty = every value.
struct SearchLimits {
  int dp = 0, tp = 0, pp = 0, cp = 0, micro_batch = 0;
  int max_micro_batch = 64;
  std::optional<int> zero;                    // a ZeRO level 0-3
  std::optional<bool> reshard_after_forward;  // ZeRO-3
  int zero_shard = 0;                         // ZeRO-2/3: HSDP's shard group; 0 = dp
  std::optional<Recompute> recompute;
  std::optional<bool> sequence_parallel;      // with tp > 1 (unset: both, where T divides)
};

struct Plan {
  double rank_bytes = 0;    // a rank's memory (Cluster::mem_bytes)
  double usable_bytes = 0;  // what a layout may hold of it: usable_memory (kMemoryMargin kept)
  std::vector<Candidate> fits;     // fastest first (ties: less memory first)
  std::vector<Rejected> rejected;  // grids with no option that fits, in enumeration order
};

Plan make_plan(const ModelConfig& config, const RunShape& run, const Cluster& cluster,
               const Calibration& calibration, const SearchLimits& limits);

}  // namespace mpitrain
