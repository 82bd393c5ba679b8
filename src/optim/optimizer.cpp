#include "mpitrain/optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {
namespace {

// norms (per tensor {sum w^2, sum u^2}) summed over `group`, a tensor `replicated` over it
// counting once: the group's rank 0's copy. Nothing for a group of one.
template <class Replicated>
void sum_over(Communicator* group, const std::vector<ParamTensor>& tensors,
              std::vector<double>& norms, Replicated replicated) {
  if (!group || group->size() == 1) return;
  if (group->rank() != 0)
    for (size_t k = 0; k < tensors.size(); ++k)
      if (replicated(tensors[k])) norms[2 * k] = norms[2 * k + 1] = 0.0;
  group->all_reduce(norms.data(), norms.size(), ReduceOp::Sum);
}

}  // namespace

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
  if (groups_.dp && groups_.ep)
    MPITRAIN_THROW("LAMB's norms over both the dp ranges and ep would count the experts ep times");
  if (!owned_.ranges().empty() && owned_.ranges().back().hi > layout.total())
    MPITRAIN_THROW("optimizer range ending at " + std::to_string(owned_.ranges().back().hi) +
                   " is not inside the " + std::to_string(layout.total()) + " parameters");
  const std::vector<ParamTensor>& tensors = layout.tensors();
  for (size_t k = 0; k < tensors.size(); ++k) {
    const ShardRanges::Overlap o =
        owned_.overlap(tensors[k].offset, tensors[k].offset + tensors[k].numel);
    if (o.size() == 0) continue;
    segments_.push_back({o.at, o.size(), tensors[k].decay});
    segment_tensor_.push_back(k);
  }
  const size_t n = owned_.size();
  if (separate_master()) {
    master_ = backend_.alloc(n);
    backend_.convert(master_, params_, n);  // the compute copy's values, as Megatron does
  } else {
    master_ = params_.full();
  }
  for (size_t b = 0; b < state_names(config.kind).size(); ++b) state_.push_back(backend_.alloc(n));
  if (config.kind == OptimizerKind::Lamb) {
    sums_.assign(2 * segments_.size(), 0.0);
    norms_.assign(2 * tensors.size(), 0.0);
    lamb_lr_.assign(segments_.size(), 0.0f);
  }
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
  // 2-byte storage: AdamW and SGD write the compute copy (the master rounded) in their pass
  const bool fused = separate_master() && params_.half() && c.kind != OptimizerKind::Lamb;
  const Buf<float> rounded = fused ? params_ : Buf<float>();
  if (c.kind == OptimizerKind::Lamb)
    lamb_step(grads, lr, grad_scale);
  else if (c.kind == OptimizerKind::AdamW)
    backend_.adamw(master_, grads, state_[0], state_[1], segments_, lr, c.beta1, c.beta2, c.eps,
                   c.weight_decay, t_, grad_scale, rounded);
  else
    backend_.sgd_momentum(master_, grads, state_[0], segments_, lr, c.momentum, c.weight_decay,
                          grad_scale, rounded);
  if (separate_master() && !fused) {  // the compute copy: the master rounded to the precision
    const size_t n = owned_.size();
    backend_.convert(params_, master_, n);  // 2-byte storage (LAMB): rounded as written
    if (float* emulated = params_.full()) backend_.round_to(emulated, n, precision_);
  }
}

void Optimizer::lamb_step(const float* grads, float lr, float grad_scale) {
  const OptimizerConfig& c = config_;
  const std::vector<ParamTensor>& tensors = layout_.tensors();
  // Pass 1: moments, and the squared norms of this rank's part of each decayed tensor. Tensors
  // without decay take the AdamW step (trust ratio 1) right away.
  backend_.lamb_moments(master_, grads, state_[0], state_[1], segments_, lr, c.beta1, c.beta2,
                        c.eps, c.weight_decay, t_, grad_scale, sums_.data());
  std::fill(norms_.begin(), norms_.end(), 0.0);
  for (size_t s = 0; s < segments_.size(); ++s) {
    norms_[2 * segment_tensor_[s]] = sums_[2 * s];
    norms_[2 * segment_tensor_[s] + 1] = sums_[2 * s + 1];
  }
  // The whole tensors' sums: over the ranges of the dp group, or over ep for the ep-split
  // experts (a tensor replicated over ep counts once: ep rank 0's copy), then over tp for split
  // tensors (a tensor replicated over tp counts once: tp rank 0's copy).
  if (groups_.dp) groups_.dp->all_reduce(norms_.data(), norms_.size(), ReduceOp::Sum);
  sum_over(groups_.ep, tensors, norms_, [](const ParamTensor& t) { return !t.ep_split; });
  sum_over(groups_.tp, tensors, norms_, [](const ParamTensor& t) { return t.tp_replicated(); });
  if (groups_.tied && layout_.has(Slot::Wte)) {
    const size_t k = &layout_.find("wte") - tensors.data();
    groups_.tied->all_reduce(&norms_[2 * k], 2, ReduceOp::Max);  // the copies' sums agree
  }
  // Pass 2: w -= lr r u with the trust ratio r = ||w|| / ||u|| (1 when either is 0).
  for (size_t s = 0; s < segments_.size(); ++s) {
    const size_t k = segment_tensor_[s];
    const double w = std::sqrt(norms_[2 * k]), u = std::sqrt(norms_[2 * k + 1]);
    const double ratio = w > 0 && u > 0 ? w / u : 1.0;
    lamb_lr_[s] = static_cast<float>(lr * ratio);
  }
  backend_.lamb_update(master_, state_[0], state_[1], segments_, lamb_lr_.data(), c.beta1, c.beta2,
                       c.eps, c.weight_decay, t_);
}

}  // namespace mpitrain
