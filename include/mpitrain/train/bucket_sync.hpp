// ZeRO levels 0 and 1 as a DpSync: the model's whole gradient buffer synced in GradBuckets
// (parallel/grad_sync.hpp); the owned elements are the buckets' range (all of them without ZeRO,
// this dp rank's range with ZeRO-1), compact = the whole buffers from the range's start.
#pragma once

#include "mpitrain/model/model.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/train/dp_sync.hpp"

namespace mpitrain {

class BucketSync : public DpSync {
 public:
  BucketSync(GradBuckets& buckets, Model<float>& model)
      : buckets_(buckets), model_(model), owned_({buckets.owned()}) {}
  void zero_grads() override { model_.zero_grads(); }
  void ready_from(size_t offset) override { buckets_.ready_from(offset); }
  void finish() override { buckets_.finish(); }
  const ShardRanges& owned() const override { return owned_; }
  float* owned_grads() override { return model_.grads() + buckets_.owned().lo; }
  Buf<float> owned_params() override { return model_.params() + buckets_.owned().lo; }
  void params_updated() override { buckets_.gather_params(model_.params()); }

 private:
  GradBuckets& buckets_;
  Model<float>& model_;
  ShardRanges owned_;
};

}  // namespace mpitrain
