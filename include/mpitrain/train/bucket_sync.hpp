// ZeRO levels 0 and 1 as a DpSync: the model's whole gradient buffer synced in GradBuckets
// (parallel/grad_sync.hpp); the owned elements are the buckets' ranges (all of them without ZeRO,
// this dp rank's range with ZeRO-1), compact = the whole buffers from the range's start. ZeRO-1
// with expert parallelism owns a dense and an expert piece apart: its owned gradients and
// parameters are then compact copies of their own (train/owned_copy.hpp), the gradients taken
// at finish(), the parameters at construction (the model's initialised values) and put back
// before params_updated()'s all-gather.
#pragma once

#include "mpitrain/model/model.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/train/dp_sync.hpp"

namespace mpitrain {

class BucketSync : public DpSync {
 public:
  BucketSync(GradBuckets& buckets, Model<float>& model);
  ~BucketSync() override;
  BucketSync(const BucketSync&) = delete;
  BucketSync& operator=(const BucketSync&) = delete;

  void zero_grads() override { model_.zero_grads(); }
  void ready_from(size_t offset) override { buckets_.ready_from(offset); }
  void finish() override;
  const ShardRanges& owned() const override { return owned_; }
  float* owned_grads() override { return grads_; }
  Buf<float> owned_params() override { return params_; }
  void params_updated() override;
  // Bytes of the compact copies (0 where the owned range is one).
  size_t bytes() const { return bytes_; }

 private:
  GradBuckets& buckets_;
  Model<float>& model_;
  ShardRanges owned_;
  bool compact_;  // owned_ is several ranges: grads_ and params_ are copies of their own
  float* grads_ = nullptr;
  Buf<float> params_;
  size_t bytes_ = 0;
};

}  // namespace mpitrain
