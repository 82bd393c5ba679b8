// ZeRO-2 and ZeRO-3 (FSDP-style fully sharded data parallelism) for one pipeline stage.
//
// The stage's flat buffer is cut into units (ParamLayout::units(): each block; wte, wpe, the
// final norm and lm_head alone), each split over the shard group (the data-parallel group, or
// with HSDP a group of --zero-shard-size of its ranks). owned() lists this rank's pieces; its
// gradients, optimizer state, master and (ZeRO-3) parameters are compact buffers over them.
//   ZeRO-3  piece r of every unit is zero_range(unit, D, r), so that every gather is balanced.
//           Units of 40 and 60 floats, 2 ranks: rank 0 holds [0, 32) [40, 72), rank 1 [32, 40)
//           [72, 100).
//   ZeRO-2  rank r owns zero_range(stage, D, r), one contiguous range as ZeRO-1 (and DeepSpeed)
//           cut it: its pieces are the units' overlaps with it, back to back in the model's
//           whole copy, which the optimizer updates in place. Rank 0 holds [0, 40) [40, 64),
//           rank 1 [64, 100).
//
// As the Model's UnitLender:
//   grads(u)       a gradient buffer for the whole unit, zeroed where backward adds to it
//                  (added_gradient_ranges; outer units: one each; blocks: two in turn, so a
//                  block's reduce-scatter runs while the next block's backward does)
//   grads_done(u)  starts the reduce-scatter of the buffer over the shard group, in place; its
//                  piece is added to the sharded gradients when the buffer is next needed or at
//                  finish(). Every micro-batch is reduce-scattered as its backward ends: holding
//                  whole gradients until the last micro-batch is the memory ZeRO-2 removes.
//   params(u)      ZeRO-2: the model's whole compute copy. ZeRO-3: the unit all-gathered (in the
//                  storage type: 2-byte messages for bf16/fp16) into a buffer — outer units one
//                  each, blocks two in turn — and, with prefetch, the next unit of the pass's order
//                  started, so its gather runs while this unit computes:
//                    forward   wte, wpe, blocks up, lnf, head    backward  lnf, head, blocks down
//   params_done    ZeRO-3 with reshard_after_forward: the buffer is free again (gathered anew for
//                  the backward and each micro-batch); without it every unit, once gathered, stays
//                  in a whole-stage buffer until the parameters change (params_updated).
// Expert parallelism (ShardingOptions::expert_dp): the ep-split expert ranges hold different
// experts on different ep ranks, so, as torchtitan shards experts over the ranks holding the same
// ones, a block unit is cut at their edges into segments, each reduce-scattered and gathered
// over its own group: the dense ones over the shard group, the expert ones over expert-dp.
//   ZeRO-3  piece r of every segment is zero_range(segment, its group's size, r).
//   ZeRO-2  the pieces are the segments' parts of zero_owned (shard_ranges.hpp): one piece of the
//           dense elements read as one sequence, one of the experts'; not back to back, so the
//           optimizer updates a compact copy (take_params(), put back in params_updated()).
// finish() completes the reduce-scatters; with HSDP it then all-reduces the sharded gradients over
// the replica group (the ranks holding the same pieces in the other shard groups). After the
// optimizer has written owned_params(): params_updated() all-gathers them into the model's whole
// copy (ZeRO-2), or marks the gathered units stale (ZeRO-3).
// Memory (floats; w bytes a compute element): ZeRO-2 whole params (the model's) + S + G
// gradients; ZeRO-3 S (w) + gathered (w) + S + G, where S = owned().size(),
// G = the outer units + 2 blocks, gathered = the outer units + 2 blocks (1 without prefetch), or
// the whole stage without resharding.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/train/dp_sync.hpp"

namespace mpitrain {

struct ShardingOptions {
  int level = 3;                      // 2: gradients sharded; 3: parameters too
  bool reshard_after_forward = true;  // ZeRO-3: gather again for the backward
  bool prefetch = true;               // ZeRO-3: the next unit's gather started early
  Communicator* expert_dp = nullptr;          // expert parallelism: the expert ranges' group
  std::vector<FlatRange> expert_ranges = {};  // ... and those ranges (ascending, disjoint)
};

class ShardedUnits : public UnitLender<float>, public DpSync {
 public:
  // shard: the group the units are split over; replicas: HSDP's group of the ranks holding the
  // same pieces (null: none). whole_params: ZeRO-2 the model's compute copy (storage type),
  // ZeRO-3 null. The shard group's ranks must construct it with the same layout.
  ShardedUnits(Backend<float>& backend, const ParamLayout& layout, Communicator& shard,
               Communicator* replicas, Precision storage, const ShardingOptions& options,
               Buf<float> whole_params = nullptr);
  ~ShardedUnits() override;
  ShardedUnits(const ShardedUnits&) = delete;
  ShardedUnits& operator=(const ShardedUnits&) = delete;

  const ShardingOptions& options() const { return opt_; }
  // Bytes this object allocated: owned params (ZeRO-3) and gradients, unit buffers.
  size_t bytes() const { return bytes_; }

  // ZeRO-3: the owned part of tensor t from its local values (host fp32, t.numel), e.g. an
  // initialisation (Model's initial_tensors) or a loaded model.
  void set_tensor(const ParamTensor& t, const float* local);
  // ZeRO-2 whose owned pieces are not back to back (expert parallelism): the compact copy
  // owned_params() takes the model's whole copy's values (after its initialisation); else nothing.
  void take_params();
  // The whole local parameters in host fp32 (layout.total()), for an export or a sample;
  // host_shard: the shard group's host communicator, host_experts the expert-dp group's (with
  // expert ranges). Collective over both.
  std::vector<float> gather_whole(Communicator& host_shard, Communicator* host_experts = nullptr);

  // UnitLender
  CBuf<float> params(int u, bool backward) override;
  void params_done(int u, bool backward) override;
  float* grads(int u) override;
  void grads_done(int u) override;

  // DpSync
  void zero_grads() override;
  void ready_from(size_t) override {}  // units are reduced as the model hands them back
  void finish() override;
  const ShardRanges& owned() const override { return owned_; }
  float* owned_grads() override { return grad_shard_; }
  Buf<float> owned_params() override { return param_shard_; }
  void params_updated() override;

 private:
  // A unit's part reduced and gathered over one group: the shard group, or for an ep-split
  // expert range expert-dp. A unit without expert ranges is one segment.
  struct Segment {
    FlatRange span;        // relative to the unit
    bool expert = false;   // over opt_.expert_dp
    size_t blocks_at = 0;  // its piece per rank of its group at blocks_[blocks_at ..]
    FlatRange piece;       // this rank's piece, relative to the unit
    size_t at = 0;         // the piece's compact offset
    CommHandle gather{}, reduce{};
  };
  struct Unit {
    std::vector<Segment> segments;
    std::vector<FlatRange> added;  // added_gradient_ranges: what grads() zeroes
    int param_buffer = -1;  // ZeRO-3: index into param_buffers_
    int grad_buffer = -1;   // index into grad_buffers_
    bool gathered = false, gathering = false, reducing = false;
  };
  struct Buffer {
    Buf<float> data;
    int holder = -1;  // the unit whose values it holds (or is gathering / reducing)
  };
  Communicator& group(const Segment& seg) const;
  std::span<const size_t> blocks(const Segment& seg) const;
  void wait_gathers(Unit& unit);
  void wait_reduces(Unit& unit);
  void progress();  // both groups' started calls
  // The all-gathers of u's segments' pieces in place in `unit` (its storage type).
  void gather_start(Buf<float> unit, Unit& u);
  void start_gather(int u);  // into the unit's parameter buffer
  void prefetch_after(int u, bool backward);
  void fold(int u);  // the unit's finished reduce-scatter added into the sharded gradients

  Backend<float>& backend_;
  const ParamLayout& layout_;
  Communicator& shard_;
  Communicator* replicas_;
  Precision storage_;
  ShardingOptions opt_;
  Buf<float> whole_params_;
  ShardRanges owned_;
  std::vector<Unit> units_;
  std::vector<size_t> blocks_;  // the segments' pieces per rank (Segment::blocks_at)
  bool compact_params_ = false;  // param_shard_ a buffer of its own (ZeRO-3; ZeRO-2 with experts)
  Buf<float> param_shard_;
  float* grad_shard_ = nullptr;
  std::vector<Buffer> param_buffers_, grad_buffers_;
  std::vector<void*> allocations_;
  size_t bytes_ = 0;
  // The units whose parameters each pass takes, in order, and where the last take was.
  std::vector<int> order_[2];
  size_t cursor_[2] = {0, 0};
};

}  // namespace mpitrain
