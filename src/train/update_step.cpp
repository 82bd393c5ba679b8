#include "mpitrain/train/update_step.hpp"

#include <algorithm>
#include <cmath>

namespace mpitrain {

UpdateStep::UpdateStep(Model<float>& model, GradBuckets& buckets, Optimizer& optimizer,
                       LossScaler& scaler, NumericGuard& guard, UpdateGroups groups,
                       double grad_clip, bool zero, TraceRecorder* trace)
    : model_(model),
      buckets_(buckets),
      optimizer_(optimizer),
      scaler_(scaler),
      guard_(guard),
      groups_(groups),
      grad_clip_(grad_clip),
      zero_(zero),
      tied_wte_(groups.tied ? &model.layout().find("wte") : nullptr),
      trace_(trace) {}

void UpdateStep::grads_ready(size_t offset) {
  if (tied_wte_) offset = std::max(offset, tied_wte_->offset + tied_wte_->numel);
  buckets_.ready_from(offset);
}

UpdateResult UpdateStep::apply(double lr, double loss, double global_loss, int64_t step) {
  optimizer_seconds_ = 0.0;
  if (tied_wte_)
    groups_.tied->all_reduce(model_.grads() + tied_wte_->offset, tied_wte_->numel, ReduceOp::Sum);
  {
    TraceScope wait(trace_, TraceLane::Comm, "dp grad sync wait");
    buckets_.finish();
  }
  model_.sync_replicated_grads();
  const FlatRange own = buckets_.owned();
  double square_sum = model_.grad_square_sum(own.lo, own.hi);
  Communicator* norm_group = zero_ ? groups_.world : groups_.model_parallel;
  norm_group->all_reduce(&square_sum, 1, ReduceOp::Sum);
  const double scale = scaler_.scale();
  const double norm = std::sqrt(square_sum) / scale;
  if (!std::isfinite(norm) || !std::isfinite(global_loss)) {
    if (scaler_.enabled()) {
      scaler_.update(true);
      return {norm, StepVerdict::Skip};
    }
    const NonFinite finding =
        find_nonfinite(model_.layout(), model_.grads(), own.lo, own.hi, loss, *groups_.world);
    return {norm, guard_.apply(finding, model_.layout(), model_.grads(), loss, step)};
  }
  scaler_.update(false);
  const double clip = grad_clip_ > 0 && norm > grad_clip_ ? grad_clip_ / norm : 1.0;
  TraceScope region(trace_, TraceLane::Compute, "optimizer", &optimizer_seconds_);
  optimizer_.step(model_.grads(), static_cast<float>(lr), static_cast<float>(clip / scale));
  buckets_.gather_params(model_.params());
  return {norm, StepVerdict::Update};
}

}  // namespace mpitrain
