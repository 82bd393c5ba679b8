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
//   grads(u)       a zeroed gradient buffer for the whole unit (outer units: one each; blocks: two
//                  in turn, so a block's reduce-scatter runs while the next block's backward does)
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
  // The whole local parameters in host fp32 (layout.total()), for an export or a sample;
  // host_shard: the shard group's host communicator. Collective over the shard group.
  std::vector<float> gather_whole(Communicator& host_shard);

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
  struct Unit {
    FlatRange piece;        // this rank's piece, relative to the unit
    size_t at = 0;          // the piece's compact offset
    int param_buffer = -1;  // ZeRO-3: index into param_buffers_
    int grad_buffer = -1;   // index into grad_buffers_
    bool gathered = false, gathering = false, reducing = false;
    CommHandle gather{}, reduce{};
  };
  struct Buffer {
    Buf<float> data;
    int holder = -1;  // the unit whose values it holds (or is gathering / reducing)
  };
  size_t unit_size(int u) const { return layout_.units()[u].size(); }
  std::span<const size_t> blocks(int u) const;
  // The all-gather of unit u's pieces in place in `unit` (its storage type).
  CommHandle gather_start(Buf<float> unit, int u);
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
  std::vector<size_t> blocks_;  // unit u's piece per rank at [u * D + r]
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
