#include "mpitrain/parallel/grad_sync.hpp"

#include <algorithm>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

std::vector<GroupSpan> gradient_buckets(size_t n, size_t per,
                                        const std::vector<FlatRange>& experts) {
  std::vector<GroupSpan> buckets;
  for (size_t end = n; end > 0;) {
    size_t begin = end - std::min(per, end);
    bool expert = false;
    for (const FlatRange& r : experts) {
      for (size_t edge : {r.lo, r.hi})
        if (edge > begin && edge < end) begin = edge;
      expert = expert || (r.lo < end && end <= r.hi);
    }
    buckets.push_back({{begin, end}, expert});
    end = begin;
  }
  return buckets;
}

GradBuckets::GradBuckets(Communicator& dp, float* grads, size_t n, size_t bucket_bytes,
                         const GradSyncOptions& options)
    : dp_(dp), grads_(grads), n_(n), opt_(options) {
  require(!opt_.zero || opt_.compress == GradCompress::None,
          "grad-compress " + to_string(opt_.compress) +
              " is not supported with zero 1 (ZeRO's reduce-scatter and all-gather are not "
              "compressed): use one or the other");
  require(opt_.compress != GradCompress::TopK || (opt_.topk_ratio > 0 && opt_.topk_ratio <= 1),
          "topk-ratio must lie in (0, 1]");
  const bool plain = !opt_.zero && opt_.compress == GradCompress::None;
  require(opt_.compress == GradCompress::None || !opt_.expert_dp,
          "expert parallelism's gradients are not compressed: use --grad-compress none with "
          "--ep > 1");
  size_t per = std::max<size_t>(1, bucket_bytes / sizeof(float));
  if (!plain) per = std::min(per, kMaxBucketFloats);
  const std::vector<FlatRange> experts =
      opt_.expert_dp ? opt_.expert_ranges : std::vector<FlatRange>{};
  for (const GroupSpan& bucket : gradient_buckets(n, per, experts)) {
    begin_.push_back(bucket.range.lo);
    expert_.push_back(bucket.expert);
  }
  handles_.resize(begin_.size());

  const int ranks = dp_.size();
  const int expert_ranks = opt_.expert_dp ? opt_.expert_dp->size() : 1;
  // Rank r's ranges: its own group's rank r (dense: dp, expert buckets: expert-dp).
  const auto owned_by = [&](int dense_rank, int expert_rank) {
    return zero_owned(n_, experts, ranks, dense_rank, expert_ranks, expert_rank);
  };
  owned_ = opt_.zero ? owned_by(dp_.rank(), opt_.expert_dp ? opt_.expert_dp->rank() : 0)
                     : std::vector<FlatRange>{{0, n_}};
  if (ranks == 1 || plain) return;
  if (opt_.zero) {  // a bucket lies in one dense segment or one expert range
    std::vector<ShardRanges> dense_owned, expert_owned;  // each rank's of its group, once
    for (int r = 0; r < ranks; ++r) dense_owned.emplace_back(owned_by(r, 0));
    for (int q = 0; q < expert_ranks; ++q) expert_owned.emplace_back(owned_by(0, q));
    for (size_t b = 0; b < begin_.size(); ++b) {
      const std::vector<ShardRanges>& group = expert_[b] ? expert_owned : dense_owned;
      for (int r = 0; r < ranks; ++r)
        blocks_.push_back(r < static_cast<int>(group.size())
                              ? group[r].overlap(begin_[b], end_of(b)).size()
                              : 0);
    }
    return;
  }
  size_t stage = 0, pairs = 0, residual2 = 0, longest = 0;
  for (size_t b = 0; b < begin_.size(); ++b) {
    const size_t len = end_of(b) - begin_[b];
    longest = std::max(longest, len);
    if (opt_.compress == GradCompress::TopK) {
      chunk_.push_back(topk_count(len, opt_.topk_ratio));
      pairs_at_.push_back(pairs);
      pairs += (ranks + 1) * chunk_.back();
    } else {
      chunk_.push_back((len + ranks - 1) / ranks);
      stage_at_.push_back(stage);
      stage += 2 * ranks * block_bytes(opt_.compress, chunk_.back());
      residual2_at_.push_back(residual2);
      residual2 += chunk_.back();
    }
  }
  stage_.resize(stage);
  pairs_.resize(pairs);
  if (opt_.compress == GradCompress::TopK) scratch_.resize(longest);
  if (opt_.compress == GradCompress::TopK || opt_.compress == GradCompress::Int8)
    residual_.assign(n_, 0.0f);
  if (opt_.compress == GradCompress::Int8) residual2_.assign(residual2, 0.0f);
}

Communicator& GradBuckets::group(size_t b) const { return expert_[b] ? *opt_.expert_dp : dp_; }

std::span<const size_t> GradBuckets::blocks(size_t b) const {
  const size_t ranks = static_cast<size_t>(dp_.size());
  return {blocks_.data() + b * ranks, static_cast<size_t>(group(b).size())};
}

size_t GradBuckets::chunk_from(size_t b, int r) const {
  return std::min(end_of(b) - begin_[b], static_cast<size_t>(r) * chunk_[b]);
}

size_t GradBuckets::chunk_len(size_t b, int r) const {
  return std::min(chunk_[b], end_of(b) - begin_[b] - chunk_from(b, r));
}

void GradBuckets::ready_from(size_t offset) {
  if (dp_.size() == 1) return;
  for (; started_ < begin_.size() && begin_[started_] >= offset; ++started_) start(started_);
  dp_.progress();  // called once per layer of backward: keeps the started buckets moving
  if (opt_.expert_dp) opt_.expert_dp->progress();
}

void GradBuckets::start(size_t b) {
  float* g = grads_ + begin_[b];
  if (opt_.zero)
    handles_[b] = group(b).reduce_scatter_start(g, blocks(b), ReduceOp::Sum);
  else if (opt_.compress == GradCompress::None)
    handles_[b] = group(b).all_reduce_start(g, end_of(b) - begin_[b], ReduceOp::Sum);
  else if (opt_.compress == GradCompress::TopK)
    start_topk(b);
  else
    start_encoded(b);
}

// Chunk r encoded into send block r; all-to-all into the received blocks.
void GradBuckets::start_encoded(size_t b) {
  const int ranks = dp_.size();
  const size_t bytes = block_bytes(opt_.compress, chunk_[b]);
  std::byte* send = stage_.data() + stage_at_[b];
  float* x = grads_ + begin_[b];
  float* dropped = nullptr;
  if (!residual_.empty()) {  // int8: encode gradient + residual, keep what this drops
    float* r = residual_.data() + begin_[b];
    const size_t len = end_of(b) - begin_[b];
    for (size_t i = 0; i < len; ++i) r[i] += x[i];
    x = dropped = r;
  }
  for (int r = 0; r < ranks; ++r) {
    const size_t from = chunk_from(b, r);
    encode_block(opt_.compress, x + from, chunk_len(b, r), chunk_[b], send + r * bytes,
                 dropped ? dropped + from : nullptr);
  }
  handles_[b] = dp_.all_to_all_start(send, send + ranks * bytes, bytes);
}

void GradBuckets::start_topk(size_t b) {
  const size_t len = end_of(b) - begin_[b], k = chunk_[b];
  const float* g = grads_ + begin_[b];
  float* r = residual_.data() + begin_[b];
  for (size_t i = 0; i < len; ++i) r[i] += g[i];
  TopkPair* send = pairs_.data() + pairs_at_[b];
  take_topk(r, len, k, scratch_.data(), send);  // r keeps what is dropped
  handles_[b] = dp_.all_gather_start(send, send + k, k * sizeof(TopkPair));
}

void GradBuckets::finish() {
  if (dp_.size() == 1) return;
  ready_from(0);
  if (opt_.compress == GradCompress::TopK) {
    finish_topk();
  } else if (opt_.compress != GradCompress::None) {
    finish_encoded();
  } else {  // zero: each rank's block of the sum is already at its own offset
    for (size_t b = 0; b < started_; ++b) group(b).wait(handles_[b]);
  }
  started_ = 0;
}

// Per bucket: sum this rank's chunk from the dp received blocks, encode it, all-gather; then
// decode every chunk into the bucket.
void GradBuckets::finish_encoded() {
  const int ranks = dp_.size(), me = dp_.rank();
  for (size_t b = 0; b < started_; ++b) {
    dp_.wait(handles_[b]);
    const size_t bytes = block_bytes(opt_.compress, chunk_[b]);
    std::byte* send = stage_.data() + stage_at_[b];
    std::byte* recv = send + ranks * bytes;
    const size_t m = chunk_len(b, me);
    float* sum = grads_ + begin_[b] + chunk_from(b, me);
    std::fill(sum, sum + m, 0.0f);
    for (int r = 0; r < ranks; ++r)
      decode_add_block(opt_.compress, recv + r * bytes, m, chunk_[b], sum);
    float* x = sum;
    float* dropped = nullptr;
    if (!residual2_.empty()) {  // int8: encode sum + residual, keep what this drops
      float* r2 = residual2_.data() + residual2_at_[b];
      for (size_t i = 0; i < m; ++i) r2[i] += sum[i];
      x = dropped = r2;
    }
    encode_block(opt_.compress, x, m, chunk_[b], recv, dropped);  // received blocks are consumed
    handles_[b] = dp_.all_gather_start(recv, send, bytes);
  }
  for (size_t b = 0; b < started_; ++b) {
    dp_.wait(handles_[b]);
    const size_t bytes = block_bytes(opt_.compress, chunk_[b]);
    const std::byte* gathered = stage_.data() + stage_at_[b];
    for (int r = 0; r < ranks; ++r)
      decode_block(opt_.compress, gathered + r * bytes, chunk_len(b, r), chunk_[b],
                   grads_ + begin_[b] + chunk_from(b, r));
  }
}

void GradBuckets::finish_topk() {
  const size_t ranks = static_cast<size_t>(dp_.size());
  for (size_t b = 0; b < started_; ++b) {
    dp_.wait(handles_[b]);
    float* g = grads_ + begin_[b];
    std::fill(g, g + (end_of(b) - begin_[b]), 0.0f);
    const TopkPair* all = pairs_.data() + pairs_at_[b] + chunk_[b];
    for (size_t j = 0; j < ranks * chunk_[b]; ++j) g[all[j].index] += all[j].value;
  }
}

void GradBuckets::gather_params(Buf<float> params) {
  if (!opt_.zero || dp_.size() == 1) return;
  if (started_ != 0) MPITRAIN_THROW("gather_params() while the gradient sync is in flight");
  for (size_t b = 0; b < begin_.size(); ++b) {  // the compute copy, in its storage type
    const Buf<float> bucket = params + begin_[b];
    handles_[b] = bucket.full() ? group(b).all_gather_start(bucket.full(), blocks(b))
                                : group(b).all_gather_start(bucket.half(), blocks(b));
  }
  for (size_t b = 0; b < begin_.size(); ++b) group(b).wait(handles_[b]);
}

void GradBuckets::add_residuals(float* dense) const {
  for (size_t i = 0; i < residual_.size(); ++i) dense[i] += residual_[i];
  if (residual2_.empty()) return;
  const int me = dp_.rank();
  for (size_t b = 0; b < begin_.size(); ++b) {
    float* d = dense + begin_[b] + chunk_from(b, me);
    const float* r2 = residual2_.data() + residual2_at_[b];
    for (size_t i = 0, m = chunk_len(b, me); i < m; ++i) d[i] += r2[i];
  }
}

}  // namespace mpitrain
