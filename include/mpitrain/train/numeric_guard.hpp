// Non-finite losses and gradients, caught at the step boundary before the optimizer update.
//
// find_nonfinite() looks at this rank's loss and gradients (or the range of them it owns, under
// ZeRO-1) and agrees with every rank on whether anything is non-finite and where it first is: the
// smallest global tensor index (the whole model's order: embedding, blocks by layer, a block's
// tensors in order, head), then the lowest world rank. When all is well it costs one pass over
// the gradients and one all-reduce of two numbers over the world.
// Under fp16 the dynamic loss scaler consumes its result (skip the update, halve the scale, no
// message); under bf16 / fp32 NumericGuard applies --on-nan:
//   stop  rank 0 prints the finding, writes <out-dir>/nonfinite-step-<S>.json (every rank's
//         non-finite tensors with their statistics, and which ranks' losses were non-finite),
//         and the trainer exits with kExitFailure;
//   skip  rank 0 prints the finding; the update is skipped on every rank and counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"
#include "mpitrain/runtime/fault.hpp"

namespace mpitrain {

struct TensorStats {
  std::vector<int64_t> shape;  // this rank's (local) shape
  const char* dtype = "f32";
  uint64_t begin = 0;                          // the first element looked at
  uint64_t count = 0;                          // elements looked at (all, unless a ZeRO range)
  uint64_t nan = 0, inf = 0;                   // non-finite elements
  double min = 0, max = 0, mean = 0, std = 0;  // over the finite elements; 0 if there are none
};
TensorStats tensor_stats(const float* data, const std::vector<int64_t>& shape);
// Of elements [begin, begin + count) only; data points at element begin.
TensorStats tensor_stats(const float* data, const std::vector<int64_t>& shape, uint64_t begin,
                         uint64_t count);
// "shape [64, 64] f32, 1 NaN, 0 inf of 4096; finite min -0.0123 max 0.0131 mean 1.2e-05 std 0.0031"
// (of a part: "shape [64, 64] f32, elements 2048-3071: 1 NaN, 0 inf of 1024; ...")
std::string describe(const TensorStats& s);
// {"shape": [64, 64], "dtype": "f32", "count": 4096, "nan": 1, "inf": 0, "min": ..., ...}
// without the braces, so that callers can add members; min..std are null without finite values.
std::string json_members(const TensorStats& s);

struct NonFinite {
  bool found = false;     // anywhere: a loss or a gradient
  bool loss = false;      // some rank's loss is non-finite
  int rank = -1;          // world rank holding the first non-finite gradient; -1: none
  int global_index = -1;  // that tensor in the whole model's order
  int layer = -1;         // its block; -1 for the embedding and the head
  std::string tensor;     // its name, "h.1.attn.proj.weight"
  TensorStats stats;      // its statistics on that rank
  ShardRanges held;       // the part of this rank's flat gradient buffer looked at
  // "non-finite gradient: first in h.1.attn.proj.weight (block 1) on rank 1: shape ..."
  std::string describe() const;
};

// Collective over world; the same result on every rank. loss: this rank's loss of the step.
// Only the held part of the flat gradient buffer counts (ZeRO: this rank's shard; the rest is not
// valid there), grads compact over it; without it, all of it.
NonFinite find_nonfinite(const ParamLayout& layout, const float* grads, const ShardRanges& held,
                         double loss, MpiCommunicator& world);
NonFinite find_nonfinite(const ParamLayout& layout, const float* grads, double loss,
                         MpiCommunicator& world);

enum class NanPolicy { Skip, Stop };
NanPolicy parse_nan_policy(const std::string& text);  // "skip" or "stop"; UsageError otherwise

enum class StepVerdict { Update, Skip, Stop };

class NumericGuard {
 public:
  NumericGuard(NanPolicy policy, std::string out_dir, MpiCommunicator& world);
  // find_nonfinite, then apply: what the trainer does with this step.
  StepVerdict check(const ParamLayout& layout, const float* grads, double loss, int64_t step);
  // Update when nothing was found; otherwise the policy (collective: every rank calls it with the
  // same finding): Skip or Stop, as described at the top. Stop's diagnostics look at the part
  // of the gradients the finding looked at (grads compact over finding.held).
  StepVerdict apply(const NonFinite& finding, const ParamLayout& layout, const float* grads,
                    double loss, int64_t step);
  int64_t skipped() const { return skipped_; }  // updates skipped so far

 private:
  NanPolicy policy_;
  std::string out_dir_;
  MpiCommunicator& world_;
  int64_t skipped_ = 0;
};

// MPITRAIN_FAULT=nan:layer=L[:step=S]: in step S, once the data-parallel sync has finished,
// element 0 of block L's attn.proj.weight gradient becomes NaN on the ranks that hold it (every
// tensor-parallel slice of it; under ZeRO the rank whose shard holds it). grads: compact over held.
void apply_nan_fault(const FaultPlan& faults, const ParamLayout& layout, float* grads,
                     const ShardRanges& held, int world_rank, int64_t step);

}  // namespace mpitrain
