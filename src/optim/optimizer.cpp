#include "mpitrain/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

OptimizerKind parse_optimizer(const std::string& name) {
  if (name == "adamw") return OptimizerKind::AdamW;
  if (name == "sgd") return OptimizerKind::Sgd;
  if (name == "lamb") return OptimizerKind::Lamb;
  throw UsageError("optimizer must be 'adamw', 'sgd' or 'lamb', not '" + name + "'");
}

std::string to_string(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::AdamW: return "adamw";
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::Lamb: return "lamb";
  }
  return "?";
}

std::vector<std::string> state_names(OptimizerKind kind) {
  if (kind == OptimizerKind::Sgd) return {"momentum"};
  return {"adam_m", "adam_v"};
}

Optimizer::Optimizer(Backend<float>& backend, const ParamLayout& layout,
                     const OptimizerConfig& config, Buf<float> params, ShardRanges owned,
                     Precision precision, NormGroups groups)
    : backend_(backend),
      layout_(layout),
      config_(config),
      params_(params),
      owned_(std::move(owned)),
      precision_(precision),
      groups_(groups) {
  if (!owned_.ranges().empty() && owned_.ranges().back().hi > layout.total())
    MPITRAIN_THROW("optimizer range ending at " + std::to_string(owned_.ranges().back().hi) +
                   " is not inside the " + std::to_string(layout.total()) + " parameters");
  const std::vector<ParamTensor>& tensors = layout.tensors();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const ShardRanges::Overlap o =
        owned_.overlap(tensors[k].offset, tensors[k].offset + tensors[k].numel);
    if (o.size() > 0) segments_.push_back({k, o.at, o.size()});
  }
  const size_t n = owned_.size();
  if (separate_master()) {
    master_ = backend_.alloc(n);
    backend_.convert(master_, params_, n);  // the compute copy's values, as Megatron does
  } else {
    master_ = params_.full();
  }
  for (size_t b = 0; b < state_names(config.kind).size(); ++b) state_.push_back(backend_.alloc(n));
  if (config.kind == OptimizerKind::Lamb) norms_.assign(2 * tensors.size(), 0.0);
}

Optimizer::~Optimizer() {
  for (float* s : state_) backend_.free(s);
  if (separate_master()) backend_.free(master_);
}

size_t Optimizer::bytes() const {
  return owned_.size() * sizeof(float) * (state_.size() + (separate_master() ? 1 : 0));
}

void Optimizer::step(const float* grads, float lr, float grad_scale) {
  ++t_;
  const OptimizerConfig& c = config_;
  if (c.kind == OptimizerKind::Lamb) {
    lamb_step(grads, lr, grad_scale);
  } else {
    for (const Segment& s : segments_) {
      const float wd = layout_.tensors()[s.tensor].decay ? c.weight_decay : 0.0f;
      const size_t at = s.at, n = s.n;
      if (c.kind == OptimizerKind::AdamW)
        backend_.adamw(master_ + at, grads + at, state_[0] + at, state_[1] + at, n, lr, c.beta1,
                       c.beta2, c.eps, wd, t_, grad_scale);
      else
        backend_.sgd_momentum(master_ + at, grads + at, state_[0] + at, n, lr, c.momentum, wd,
                              grad_scale);
    }
  }
  if (separate_master()) {  // the compute copy: the master rounded to the precision
    const size_t n = owned_.size();
    backend_.convert(params_, master_, n);  // 2-byte storage: rounded as written
    if (float* emulated = params_.full()) backend_.round_to(emulated, n, precision_);
  }
}

void Optimizer::lamb_step(const float* grads, float lr, float grad_scale) {
  const OptimizerConfig& c = config_;
  const std::vector<ParamTensor>& tensors = layout_.tensors();
  // Pass 1: moments, and the squared norms of this rank's part of each decayed tensor. Tensors
  // without decay take the AdamW step (trust ratio 1) right away.
  std::fill(norms_.begin(), norms_.end(), 0.0);
  for (const Segment& s : segments_) {
    const size_t at = s.at, n = s.n;
    if (tensors[s.tensor].decay)
      backend_.lamb_moments(master_ + at, grads + at, state_[0] + at, state_[1] + at, n, c.beta1,
                            c.beta2, c.eps, c.weight_decay, t_, grad_scale, &norms_[2 * s.tensor]);
    else
      backend_.adamw(master_ + at, grads + at, state_[0] + at, state_[1] + at, n, lr, c.beta1,
                     c.beta2, c.eps, 0.0f, t_, grad_scale);
  }
  // The whole tensors' sums: over the ranges of the dp group, then over tp for split tensors
  // (a tensor replicated over tp counts once: tp rank 0's copy).
  if (groups_.dp) groups_.dp->all_reduce(norms_.data(), norms_.size(), ReduceOp::Sum);
  if (groups_.tp && groups_.tp->size() > 1) {
    if (layout_.shard().tp_rank != 0)
      for (size_t k = 0; k < tensors.size(); ++k)
        if (tensors[k].split_dim < 0) norms_[2 * k] = norms_[2 * k + 1] = 0.0;
    groups_.tp->all_reduce(norms_.data(), norms_.size(), ReduceOp::Sum);
  }
  if (groups_.tied && layout_.has(Slot::Wte)) {
    const size_t k = &layout_.find("wte") - tensors.data();
    groups_.tied->all_reduce(&norms_[2 * k], 2, ReduceOp::Max);  // the copies' sums agree
  }
  // Pass 2: w -= lr r u with the trust ratio r = ||w|| / ||u|| (1 when either is 0).
  for (const Segment& s : segments_) {
    if (!tensors[s.tensor].decay) continue;
    const double w = std::sqrt(norms_[2 * s.tensor]), u = std::sqrt(norms_[2 * s.tensor + 1]);
    const double ratio = w > 0 && u > 0 ? w / u : 1.0;
    backend_.lamb_update(master_ + s.at, state_[0] + s.at, state_[1] + s.at, s.n,
                         static_cast<float>(lr * ratio), c.beta1, c.beta2, c.eps, c.weight_decay,
                         t_);
  }
}

}  // namespace mpitrain
