#include "mpitrain/train/bucket_sync.hpp"

#include "mpitrain/train/owned_copy.hpp"

namespace mpitrain {

BucketSync::BucketSync(GradBuckets& buckets, Model<float>& model)
    : buckets_(buckets), model_(model), owned_(buckets.owned()), compact_(!contiguous(owned_)) {
  const size_t first = owned_.ranges().empty() ? 0 : owned_.ranges().front().lo;
  if (!compact_) {
    grads_ = model_.grads() + first;
    params_ = model_.params() + first;
    return;
  }
  Backend<float>& backend = model_.backend();
  backend.set_alloc_kind(AllocKind::Grads);
  grads_ = backend.alloc(owned_.size());
  backend.set_alloc_kind(AllocKind::Params);
  params_ = backend.alloc(owned_.size(), model_.params().dtype());
  backend.set_alloc_kind(AllocKind::Activations);
  bytes_ = owned_.size() * (sizeof(float) + element_bytes<float>(model_.params().dtype()));
  take_owned(backend, params_, model_.params(), owned_);
}

BucketSync::~BucketSync() {
  if (!compact_) return;
  model_.backend().free(grads_);
  model_.backend().free(params_.data());
}

void BucketSync::finish() {
  buckets_.finish();
  if (compact_) take_owned(model_.backend(), grads_, model_.grads(), owned_);
}

void BucketSync::params_updated() {
  if (compact_) put_owned(model_.backend(), model_.params(), params_, owned_);
  buckets_.gather_params(model_.params());
}

}  // namespace mpitrain
