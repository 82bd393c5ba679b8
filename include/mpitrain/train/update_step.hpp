// From a step's gradients to updated parameters, the same decision on every rank:
//
//   1. tied embeddings split over the pipeline (gpt2, pp > 1): the first and the last stage add
//      their wte gradients over the embedding group — before the data-parallel sync, whose
//      buckets holding wte are therefore started only by finish() (see grads_ready)
//   2. the data-parallel sync completes (plain or compressed all-reduce, or ZeRO-1's
//      reduce-scatter: then only this rank's range [lo, hi) of the gradients is valid)
//   3. tensors replicated over tp average their gradients
//   4. one all-reduce over the world of (squares of the primary gradients in [lo, hi), loss):
//      every replica counts its range under ZeRO-1, else data-parallel replica 0 alone (the
//      replicas hold the same sums); the loss from whichever ranks hold it. Sums spread inf/NaN,
//      so every rank sees the same non-finite norm or loss
//   5. non-finite: under fp16 the loss scaler halves its scale and the step is skipped;
//      otherwise the numeric guard (train/numeric_guard.hpp) finds the first non-finite tensor
//      and applies --on-nan (skip the step, or stop). Finite: the optimizer updates [lo, hi)
//      with clipping x 1/loss scale, and ZeRO all-gathers the parameters.
#pragma once

#include <cstddef>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/optim/loss_scaler.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/train/numeric_guard.hpp"

namespace mpitrain {

struct UpdateGroups {
  MpiCommunicator* world;
  Communicator* tied = nullptr;  // the embedding group where wte has copies on two stages
  bool counts_norm = true;       // this rank's squares count: ZeRO-1, or data-parallel rank 0
};

struct UpdateResult {
  double grad_norm;     // global, unscaled, before clipping; inf/NaN when non-finite
  double loss_sum;      // the step's loss summed over the world
  StepVerdict verdict;  // Update (done), Skip, or Stop (--on-nan stop: the run must end)
};

class UpdateStep {
 public:
  UpdateStep(Model<float>& model, GradBuckets& buckets, Optimizer& optimizer, LossScaler& scaler,
             NumericGuard& guard, UpdateGroups groups, double grad_clip,
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
  GradBuckets& buckets_;
  Optimizer& optimizer_;
  LossScaler& scaler_;
  NumericGuard& guard_;
  UpdateGroups groups_;
  double grad_clip_;
  const ParamTensor* tied_wte_;  // this rank's wte when groups.tied, else null
  TraceRecorder* trace_;
  double optimizer_seconds_ = 0.0;
};

}  // namespace mpitrain
