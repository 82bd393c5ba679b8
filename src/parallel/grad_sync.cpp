#include "mpitrain/parallel/grad_sync.hpp"

#include <algorithm>

namespace mpitrain {

GradBuckets::GradBuckets(Communicator& dp, float* grads, size_t n, size_t bucket_bytes)
    : dp_(dp), grads_(grads), n_(n) {
  const size_t per = std::max<size_t>(1, bucket_bytes / sizeof(float));
  for (size_t end = n; end > 0; end -= std::min(per, end))
    begin_.push_back(end - std::min(per, end));
  handles_.resize(begin_.size());
}

void GradBuckets::ready_from(size_t offset) {
  if (dp_.size() == 1) return;
  for (; started_ < begin_.size() && begin_[started_] >= offset; ++started_) {
    const size_t end = started_ ? begin_[started_ - 1] : n_;
    handles_[started_] =
        dp_.all_reduce_start(grads_ + begin_[started_], end - begin_[started_], ReduceOp::Sum);
  }
  dp_.progress();  // called once per layer of backward: keeps the started buckets moving
}

void GradBuckets::finish() {
  if (dp_.size() == 1) return;
  ready_from(0);
  for (size_t b = 0; b < started_; ++b) dp_.wait(handles_[b]);
  started_ = 0;
}

}  // namespace mpitrain
