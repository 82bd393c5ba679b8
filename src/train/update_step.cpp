#include "mpitrain/train/update_step.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace mpitrain {

UpdateStep::UpdateStep(Model<float>& model, DpSync& sync, Optimizer& optimizer, LossScaler& scaler,
                       NumericGuard& guard, UpdateGroups groups, double grad_clip,
                       const FaultPlan& faults, TraceRecorder* trace)
    : model_(model),
      sync_(sync),
      optimizer_(optimizer),
      scaler_(scaler),
      guard_(guard),
      groups_(groups),
      grad_clip_(grad_clip),
      faults_(faults),
      tied_wte_(groups.tied ? &model.layout().find("wte") : nullptr),
      trace_(trace) {}

void UpdateStep::grads_ready(size_t offset) {
  if (tied_wte_) offset = std::max(offset, tied_wte_->offset + tied_wte_->numel);
  sync_.ready_from(offset);
}

UpdateResult UpdateStep::apply(double lr, double loss, int64_t step) {
  optimizer_seconds_ = 0.0;
  const bool whole_grads = model_.grads() != nullptr;  // ZeRO 0/1: summed before the dp sync
  if (tied_wte_ && whole_grads)
    groups_.tied->all_reduce(model_.grads() + tied_wte_->offset, tied_wte_->numel, ReduceOp::Sum);
  {
    TraceScope wait(trace_, TraceLane::Comm, "dp grad sync wait");
    sync_.finish();
  }
  const ShardRanges& own = sync_.owned();
  float* grads = sync_.owned_grads();
  apply_nan_fault(faults_, model_.layout(), grads, own, groups_.world->rank(), step);  // tests
  if (tied_wte_ && !whole_grads) {
    const size_t at = tied_wte_->offset;
    const ShardRanges::Overlap o = own.overlap(at, at + tied_wte_->numel);
    groups_.tied->all_reduce(grads + o.at, o.size(), ReduceOp::Sum);
  }
  model_.sync_replicated_grads(grads, own);
  double sums[2] = {model_.grad_square_sum(grads, own, groups_.counts_norm,
                                           groups_.counts_expert_norm),
                    loss};
  groups_.world->all_reduce(sums, 2, ReduceOp::Sum);
  const double scale = scaler_.scale();
  const double norm = std::sqrt(sums[0]) / scale;
  if (!std::isfinite(norm) || !std::isfinite(sums[1])) {
    if (scaler_.enabled()) {
      scaler_.update(true);
      return {norm, sums[1], StepVerdict::Skip};
    }
    const float* seen = grads;
    std::vector<float> host;  // the guard reads host memory
    if (!model_.backend().host_memory()) {
      host.resize(own.size());
      model_.backend().download(host.data(), grads, host.size());
      seen = host.data();
    }
    const NonFinite finding = find_nonfinite(model_.layout(), seen, own, loss, *groups_.world);
    return {norm, sums[1], guard_.apply(finding, model_.layout(), seen, loss, step)};
  }
  scaler_.update(false);
  const double clip = grad_clip_ > 0 && norm > grad_clip_ ? grad_clip_ / norm : 1.0;
  TraceScope region(trace_, TraceLane::Compute, "optimizer", &optimizer_seconds_);
  optimizer_.step(grads, static_cast<float>(lr), static_cast<float>(clip / scale));
  sync_.params_updated();
  return {norm, sums[1], StepVerdict::Update};
}

}  // namespace mpitrain
