// Data-parallel gradient sync, overlapped with backward.
//
// Gradients of one pipeline stage live in one flat buffer; buckets are contiguous ranges of about
// bucket_bytes, cut from the END of the buffer backwards (backward produces the last layers'
// gradients first). As backward finishes a range, the all-reduces (sum) of the buckets inside it
// start; finish() waits for all. Example, n = 10 floats, bucket 16 bytes (4 floats):
//   bucket 0 = [6, 10), bucket 1 = [2, 6), bucket 2 = [0, 2); ready_from(5) starts bucket 0 only.
#pragma once

#include <cstddef>
#include <vector>

#include "mpitrain/comm/communicator.hpp"

namespace mpitrain {

class GradBuckets {
 public:
  // grads(n) must outlive this object; dp must be the data-parallel group of this stage.
  GradBuckets(Communicator& dp, float* grads, size_t n, size_t bucket_bytes);
  size_t buckets() const { return begin_.size(); }
  // Backward has finished every gradient in [offset, n): start the all-reduce (sum) of each
  // bucket lying wholly in that range not yet started.
  void ready_from(size_t offset);
  // Start whatever is left, wait for all, and reset for the next step.
  void finish();

 private:
  Communicator& dp_;
  float* grads_;
  size_t n_;
  std::vector<size_t> begin_;        // bucket b = [begin_[b], b ? begin_[b - 1] : n_)
  std::vector<CommHandle> handles_;  // one per bucket, valid for b < started_
  size_t started_ = 0;               // buckets 0 .. started_-1 are in flight
};

}  // namespace mpitrain
