// Data-parallel gradient sync, overlapped with backward.
//
// Gradients of one pipeline stage live in one flat buffer; buckets are contiguous ranges of about
// bucket_bytes, cut from the END of the buffer backwards (backward produces the last layers'
// gradients first). As backward finishes a range, the communication of the buckets inside it
// starts; finish() completes all. Example, n = 10 floats, bucket 16 bytes (4 floats):
//   bucket 0 = [6, 10), bucket 1 = [2, 6), bucket 2 = [0, 2); ready_from(5) starts bucket 0 only.
//
// What a bucket's communication is (GradSyncOptions):
//   plain       all-reduce (sum): after finish() every rank holds the whole sum.
//   zero        ZeRO-1: data-parallel rank r owns [lo_r, hi_r) (owned()). Per bucket a
//               reduce-scatter whose blocks are the bucket's overlaps with each rank's range (empty
//               for ranks owning none of it): after finish() grads[lo, hi) of this rank hold the
//               sum, the rest is undefined. Once the optimizer has updated params[lo, hi),
//               gather_params() all-gathers every rank's range, one all-gather per bucket, all
//               started before any is waited.
//   bf16, fp16, int8   the bucket is cut in dp chunks of c = ceil(len / dp) floats; chunk r is
//               encoded (parallel/compression.hpp) and sent to rank r by an all-to-all, started by
//               ready_from. finish() then, bucket by bucket: the owner decodes the dp copies of its
//               chunk, sums them in fp32, encodes the sum and all-gathers it; every rank decodes
//               all chunks. No sum is ever taken in the narrow format. Bytes: 2 (bf16, fp16) or
//               1 + 4/c (int8) per float instead of 4.
//   topk        per bucket every rank all-gathers its k = ratio x len (index, value) pairs of
//               largest magnitude; every rank adds all of them, in rank order, into the zeroed
//               bucket in fp32. 8 bytes per kept value.
// int8 and topk carry error feedback: what compression dropped is kept per rank (the residual:
// for int8 one for the gradients and one for the owner's encoded sums) and added to the next
// step's values before they are encoded, so nothing is lost, only delayed. Every rank ends with
// the same bits. With zero or compression a bucket holds at most 2^27 floats, so that every MPI
// count fits in an int. Memory besides the gradients, per gradient: bf16 / fp16 4 bytes (what is
// sent and received), int8 2 + 4 (and the residual), topk 4 (the residual) + 8 (dp + 1) x ratio.
// Expert parallelism (plain or zero): the ranges of the ep-split expert tensors are summed over
// the expert-dp group instead (the dp ranks holding the same experts; each rank's expert gradients
// already hold every ep rank's tokens routed to them, so the sum over expert-dp is the sum over
// all of dp's tokens, as the dense ranges' sum over dp). Buckets never straddle such a range's
// edge. With zero, as Megatron-Core's distributed optimizer keeps the experts in buffers of their
// own: the dense elements read as one sequence are split by zero_range over dp, the expert
// ranges' elements over expert-dp (zero_owned); an expert bucket's reduce-scatter and all-gather
// go over expert-dp with its blocks. A rank's owned ranges are then several (owned()).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "mpitrain/backend/buf.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/parallel/compression.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"

namespace mpitrain {

struct GradSyncOptions {
  bool zero = false;  // ZeRO-1 (not with compression)
  GradCompress compress = GradCompress::None;
  double topk_ratio = 0.01;  // topk: fraction of each bucket kept, in (0, 1]
  Communicator* expert_dp = nullptr;      // expert parallelism: the expert ranges' group
  std::vector<FlatRange> expert_ranges = {};  // ... and those ranges (ascending, disjoint)
};

// The buckets of n gradients, `per` elements each, from the end of the buffer (the order
// backward finishes them), each cut at the expert ranges' edges so that it lies in one group
// (expert: in an expert range, over expert-dp).
std::vector<GroupSpan> gradient_buckets(size_t n, size_t per,
                                        const std::vector<FlatRange>& experts);

class GradBuckets {
 public:
  // grads(n) must outlive this object; dp must be the data-parallel group of this stage. An
  // unsupported combination of options throws UsageError.
  GradBuckets(Communicator& dp, float* grads, size_t n, size_t bucket_bytes,
              const GradSyncOptions& options = {});
  size_t buckets() const { return begin_.size(); }
  // The ranges of the buffer this rank's optimizer updates: [0, n) without zero; with zero its
  // zero_range, or with expert ranges its zero_owned ranges (shard_ranges.hpp), ascending.
  const std::vector<FlatRange>& owned() const { return owned_; }

  // Backward has finished every gradient in [offset, n): start the communication of each bucket
  // lying wholly in that range not yet started.
  void ready_from(size_t offset);
  // Start whatever is left, complete all, and reset for the next step.
  void finish();
  // zero: params[owned()] updated on every rank -> every rank's params(n) whole. Not during a
  // step's sync (between ready_from and finish). Nothing to do without zero. params is the
  // compute copy: 2-byte messages when it is stored in 2 bytes.
  void gather_params(Buf<float> params);

  // Adds this rank's error-feedback residuals (int8, topk; else nothing) into dense(n) at the
  // positions they belong to: summed over dp, what the syncs so far have still to deliver.
  void add_residuals(float* dense) const;

 private:
  static constexpr size_t kMaxBucketFloats = size_t{1} << 27;

  size_t end_of(size_t b) const { return b ? begin_[b - 1] : n_; }
  Communicator& group(size_t b) const;              // bucket b's: dp, or expert-dp
  std::span<const size_t> blocks(size_t b) const;  // zero: bucket b's block per rank of group(b)
  // Chunk r of bucket b (bf16, fp16, int8): [from, from + m) within the bucket.
  size_t chunk_from(size_t b, int r) const;
  size_t chunk_len(size_t b, int r) const;
  void start(size_t b);
  void start_encoded(size_t b);
  void start_topk(size_t b);
  void finish_encoded();
  void finish_topk();

  Communicator& dp_;
  float* grads_;
  size_t n_;
  GradSyncOptions opt_;
  std::vector<size_t> begin_;        // bucket b = [begin_[b], b ? begin_[b - 1] : n_)
  std::vector<CommHandle> handles_;  // one per bucket, valid for b < started_
  std::vector<bool> expert_;         // bucket b lies in an expert range: over opt_.expert_dp
  size_t started_ = 0;               // buckets 0 .. started_-1 are in flight

  std::vector<FlatRange> owned_;
  std::vector<size_t> blocks_;  // zero: bucket b's block of group(b)'s rank r at [b * dp + r]
  // bf16, fp16, int8: c floats per chunk; topk: k pairs per rank. Per bucket.
  std::vector<size_t> chunk_;
  // bf16, fp16, int8: bucket b's dp blocks to send then dp received, at stage_at_[b] in stage_.
  std::vector<size_t> stage_at_;
  std::vector<std::byte> stage_;
  // topk: bucket b's k pairs to send then dp x k received, at pairs_at_[b] in pairs_.
  std::vector<size_t> pairs_at_;
  std::vector<TopkPair> pairs_;
  std::vector<uint32_t> scratch_;  // topk: selection, one bucket
  std::vector<float> residual_;    // int8, topk: dropped from the gradients (n)
  // int8: dropped from this rank's encoded sums, chunk_[b] at residual2_at_[b].
  std::vector<size_t> residual2_at_;
  std::vector<float> residual2_;
};

}  // namespace mpitrain
