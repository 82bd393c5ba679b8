// From a step's gradients to updated parameters, the same decision on every rank:
//
//   1. tied embeddings split over the pipeline (gpt2, pp > 1): the first and the last stage add
//      their wte gradients over the embedding group — ZeRO 0/1 before the data-parallel sync,
//      whose buckets holding wte are therefore started only by finish() (see grads_ready);
//      ZeRO 2/3 after it, on the owned pieces (the two copies are cut alike)
//   2. the data-parallel sync completes (train/dp_sync.hpp: plain or compressed all-reduce,
//      ZeRO-1's reduce-scatter, ZeRO-2/3's unit reduce-scatters: under ZeRO only this rank's
//      owned part of the gradients is valid); then MPITRAIN_FAULT=nan puts its NaN in (tests:
//      after backward, which writes some gradients over, and after the sync's buffers are free)
//   3. tensors replicated over tp average their gradients
//   4. one all-reduce over the world of (squares of the owned primary gradients, loss): every
//      rank of a shard group counts its part under ZeRO, else data-parallel replica 0 alone (the
//      replicas hold the same sums); the loss from whichever ranks hold it. Sums spread inf/NaN,
//      so every rank sees the same non-finite norm or loss
//   5. non-finite: under fp16 the loss scaler halves its scale and the step is skipped;
//      otherwise the numeric guard (train/numeric_guard.hpp) finds the first non-finite tensor
//      and applies --on-nan (skip the step, or stop). Finite: the optimizer updates the owned
//      part with clipping x 1/loss scale, and the sync makes the parameters whole again.
#pragma once

#include <cstddef>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/optim/loss_scaler.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/train/dp_sync.hpp"
#include "mpitrain/train/numeric_guard.hpp"

namespace mpitrain {

struct UpdateGroups {
  MpiCommunicator* world;
  Communicator* tied = nullptr;  // the embedding group where wte has copies on two stages
  bool counts_norm = true;       // this rank's squares count: ZeRO, or data-parallel rank 0
  // ... of the ep-split expert tensors (expert parallelism: expert-dp rank 0, one per ep rank)
  bool counts_expert_norm = true;
};

struct UpdateResult {
  double grad_norm;     // global, unscaled, before clipping; inf/NaN when non-finite
  double loss_sum;      // the step's loss summed over the world
  StepVerdict verdict;  // Update (done), Skip, or Stop (--on-nan stop: the run must end)
};

class UpdateStep {
 public:
  UpdateStep(Model<float>& model, DpSync& sync, Optimizer& optimizer, LossScaler& scaler,
             NumericGuard& guard, UpdateGroups groups, double grad_clip, const FaultPlan& faults,
             TraceRecorder* trace = nullptr);

  // The hook for backward's grads_ready: starts the buckets backward has finished, except those
  // holding tied wte gradients, which must first be summed over the embedding group.
  void grads_ready(size_t offset);
  // loss: this rank's share of the step's loss sum (0 where another rank counts it); a
  // non-finite loss anywhere counts as an overflow too.
  UpdateResult apply(double lr, double loss, int64_t step);
  int64_t skipped_steps() const { return scaler_.skipped_steps() + guard_.skipped(); }
  double optimizer_seconds() const { return optimizer_seconds_; }  // of the last apply()

 private:
  Model<float>& model_;
  DpSync& sync_;
  Optimizer& optimizer_;
  LossScaler& scaler_;
  NumericGuard& guard_;
  UpdateGroups groups_;
  double grad_clip_;
  const FaultPlan& faults_;
  const ParamTensor* tied_wte_;  // this rank's wte when groups.tied, else null
  TraceRecorder* trace_;
  double optimizer_seconds_ = 0.0;
};

}  // namespace mpitrain
