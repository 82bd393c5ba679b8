// ranks: 2 4
// Bucketed data-parallel gradient sync: which all-reduces start when; the plain all-reduce and
// ZeRO-1's reduce-scatter + all-gather equal a plain all-reduce of the whole buffer exactly; the
// compressed formats stay within their error, deliver everything over steps with error feedback,
// and hand MPI the bytes they imply.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/app/options.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/comm/bus_bytes.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/parallel/compression.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/rng.hpp"

using namespace mpitrain;

namespace {

// Records the non-blocking all-reduces started on it as (offset into base, count), and the other
// operations GradBuckets starts, in order, as text in `ops` (moving no data).
class RecordingComm final : public Communicator {
 public:
  RecordingComm(int size, const float* base, int rank = 0)
      : size_(size), rank_(rank), base_(base) {}
  std::vector<std::pair<size_t, size_t>> started;
  std::vector<std::string> ops;
  int waits = 0;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  CommHandle all_reduce_start(float* data, size_t n, ReduceOp op) override {
    EXPECT_EQ(op, ReduceOp::Sum);
    started.emplace_back(data - base_, n);
    return CommHandle{static_cast<int>(started.size()) - 1};
  }
  void wait(CommHandle) override { ++waits; }
  void progress() override {}
  void all_reduce(float*, size_t, ReduceOp) override { unexpected(); }
  void all_reduce(double*, size_t, ReduceOp) override { unexpected(); }
  void all_reduce(int64_t*, size_t, ReduceOp) override { unexpected(); }
  void all_reduce(uint16_t*, size_t, Precision, ReduceOp) override { unexpected(); }
  void broadcast(void*, size_t, int) override { unexpected(); }
  void barrier() override { unexpected(); }
  void all_gather(const float*, float*, size_t) override { unexpected(); }
  void reduce_scatter(const float*, float*, size_t, ReduceOp) override { unexpected(); }
  void all_gather(const uint16_t*, uint16_t*, size_t) override { unexpected(); }
  void reduce_scatter(const uint16_t*, uint16_t*, size_t, Precision, ReduceOp) override {
    unexpected();
  }
  CommHandle send_start(const float*, size_t, int, int) override { unexpected(); }
  CommHandle recv_start(float*, size_t, int, int) override { unexpected(); }
  CommHandle send_start(const uint16_t*, size_t, int, int) override { unexpected(); }
  CommHandle recv_start(uint16_t*, size_t, int, int) override { unexpected(); }
  CommHandle all_to_all_start(const void*, void*, size_t bytes) override {
    return log("all_to_all " + std::to_string(bytes));
  }
  CommHandle all_gather_start(const void*, void*, size_t bytes) override {
    return log("all_gather " + std::to_string(bytes));
  }
  CommHandle all_to_allv_start(const void*, std::span<const size_t>, void*,
                               std::span<const size_t>) override {
    unexpected();
  }
  CommHandle reduce_scatter_start(float* data, std::span<const size_t> counts,
                                  ReduceOp op) override {
    EXPECT_EQ(op, ReduceOp::Sum);
    return log("reduce_scatter " + blocks(data, counts));
  }
  CommHandle all_gather_start(float* data, std::span<const size_t> counts) override {
    return log("all_gather " + blocks(data, counts));
  }
  CommHandle all_gather_start(uint16_t*, std::span<const size_t>) override { unexpected(); }
  double blocked_seconds() const override { return 0; }
  void reset_blocked_seconds() override {}
  uint64_t bytes_sent() const override { unexpected(); }
  void reset_bytes_sent() override {}

 private:
  [[noreturn]] static void unexpected() { throw Error("GradBuckets made an unexpected call"); }
  CommHandle log(std::string op) {
    ops.push_back(std::move(op));
    return CommHandle{static_cast<int>(ops.size()) - 1};
  }
  // "offset:count,count,..."
  std::string blocks(const float* data, std::span<const size_t> counts) const {
    std::string text = std::to_string(data - base_) + ":";
    for (size_t r = 0; r < counts.size(); ++r) {
      if (r) text += ',';
      text += std::to_string(counts[r]);
    }
    return text;
  }
  int size_, rank_;
  const float* base_;
};

using Ranges = std::vector<std::pair<size_t, size_t>>;

// Multiples of 1/256 below 64 in magnitude: sums over up to 8 ranks are exact in float, so the
// comparison below is bitwise whatever order MPI's algorithms add in.
float grad(int rank, int step, size_t i) {
  const int k = static_cast<int>((i * 2654435761u + rank * 977 + step * 131) % 32768) - 16384;
  return static_cast<float>(k) / 256.0f;
}

// Backward simulated into g: gradients value(i) are written from the end in irregular pieces, and
// after each piece ready_from(its start); what is not written yet holds garbage. Step 1 writes
// everything at once and calls no ready_from at all.
template <typename Value>
void backward(GradBuckets& buckets, std::vector<float>& g, int step, Value value) {
  const size_t n = g.size();
  std::fill(g.begin(), g.end(), 1e30f);  // not yet computed
  if (step == 1) {
    for (size_t i = 0; i < n; ++i) g[i] = value(i);
    return;
  }
  size_t offset = n;
  for (size_t piece = 1; offset > 0; piece = piece * 3 % 23 + 1) {
    const size_t from = offset - std::min(offset, piece * (step + 1));
    for (size_t i = from; i < offset; ++i) g[i] = value(i);
    offset = from;
    buckets.ready_from(offset);
    if (piece % 2) buckets.ready_from(offset);  // repeated calls change nothing
  }
}

// The exact sum over ranks of x, in double.
std::vector<double> exact_sum(const std::vector<float>& x) {
  std::vector<double> sum(x.begin(), x.end());
  EXPECT_EQ(MPI_Allreduce(MPI_IN_PLACE, sum.data(), static_cast<int>(sum.size()), MPI_DOUBLE,
                          MPI_SUM, MPI_COMM_WORLD),
            MPI_SUCCESS);
  return sum;
}

// Whether every rank holds the same bits in x.
bool same_on_every_rank(const std::vector<float>& x) {
  std::vector<uint32_t> lo(x.size()), hi(x.size());
  std::memcpy(lo.data(), x.data(), x.size() * sizeof(float));
  hi = lo;
  const int n = static_cast<int>(x.size());
  EXPECT_EQ(MPI_Allreduce(MPI_IN_PLACE, lo.data(), n, MPI_UINT32_T, MPI_MIN, MPI_COMM_WORLD),
            MPI_SUCCESS);
  EXPECT_EQ(MPI_Allreduce(MPI_IN_PLACE, hi.data(), n, MPI_UINT32_T, MPI_MAX, MPI_COMM_WORLD),
            MPI_SUCCESS);
  return lo == hi;
}

// Gradient-like values: normal, times 2^e with e in [-6, 2] varying with i, different per rank
// and step.
std::vector<float> noisy(size_t n, int rank, int step) {
  Rng rng(static_cast<uint64_t>(rank) + 1, static_cast<uint64_t>(step));
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = static_cast<float>(std::ldexp(rng.normal(), static_cast<int>(i % 9) - 6));
  return x;
}

}  // namespace

TEST(GradBuckets, CutFromTheEndAndStartedAsBackwardReachesThem) {
  std::vector<float> g(10);
  RecordingComm comm(2, g.data());
  GradBuckets buckets(comm, g.data(), g.size(), 16);  // 4 floats
  EXPECT_EQ(buckets.buckets(), 3u);
  buckets.ready_from(10);
  buckets.ready_from(7);
  EXPECT_TRUE(comm.started.empty());
  buckets.ready_from(5);
  EXPECT_EQ(comm.started, (Ranges{{6, 4}}));
  buckets.ready_from(5);
  buckets.ready_from(2);
  EXPECT_EQ(comm.started, (Ranges{{6, 4}, {2, 4}}));
  EXPECT_EQ(comm.waits, 0);
  buckets.finish();
  EXPECT_EQ(comm.started, (Ranges{{6, 4}, {2, 4}, {0, 2}}));
  EXPECT_EQ(comm.waits, 3);
  // The next step starts from the end again; a jump over several buckets starts them in order.
  buckets.ready_from(1);
  EXPECT_EQ(comm.started.size(), 5u);
  EXPECT_EQ(comm.started[3], (std::pair<size_t, size_t>{6, 4}));
  EXPECT_EQ(comm.started[4], (std::pair<size_t, size_t>{2, 4}));
  buckets.finish();
  EXPECT_EQ(comm.started.size(), 6u);
  EXPECT_EQ(comm.waits, 6);
}

// Expert parallelism: buckets are cut at the edges of the expert ranges, and those lying in one
// go to the expert-dp communicator. n = 12, buckets of 4 floats, experts at [3, 8): from the end
// [8, 12) dense, [4, 8) and [3, 4) expert, [0, 3) dense.
TEST(GradBuckets, ExpertRangesGoOverTheExpertGroup) {
  std::vector<float> g(12);
  RecordingComm dp(4, g.data()), expert_dp(2, g.data());
  GradSyncOptions options;
  options.expert_dp = &expert_dp;
  options.expert_ranges = {{3, 8}};
  GradBuckets buckets(dp, g.data(), g.size(), 16, options);
  EXPECT_EQ(buckets.buckets(), 4u);
  buckets.ready_from(4);
  EXPECT_EQ(dp.started, (Ranges{{8, 4}}));
  EXPECT_EQ(expert_dp.started, (Ranges{{4, 4}}));
  buckets.finish();
  EXPECT_EQ(dp.started, (Ranges{{8, 4}, {0, 3}}));
  EXPECT_EQ(expert_dp.started, (Ranges{{4, 4}, {3, 1}}));
  EXPECT_EQ(dp.waits, 2);
  EXPECT_EQ(expert_dp.waits, 2);
  // ZeRO-1: the 7 dense elements are split over dp, the 5 expert ones over expert-dp (pieces of
  // 16: rank 0 takes all), each bucket's reduce-scatter and all-gather over its own group.
  RecordingComm zero_dp(4, g.data()), zero_expert_dp(2, g.data());
  options.zero = true;
  options.expert_dp = &zero_expert_dp;
  GradBuckets zero(zero_dp, g.data(), g.size(), 16, options);
  EXPECT_EQ(zero.owned(), (std::vector<FlatRange>{{0, 12}}));
  zero.finish();
  EXPECT_EQ(zero_dp.ops, (std::vector<std::string>{"reduce_scatter 8:4,0,0,0",
                                                   "reduce_scatter 0:3,0,0,0"}));
  EXPECT_EQ(zero_expert_dp.ops,
            (std::vector<std::string>{"reduce_scatter 4:4,0", "reduce_scatter 3:1,0"}));
  zero.gather_params(g.data());
  EXPECT_EQ(zero_expert_dp.ops.back(), "all_gather 3:1,0");
  EXPECT_EQ(zero_dp.waits + zero_expert_dp.waits, 8);
  options.compress = GradCompress::Bf16;  // compression does not take the expert ranges
  EXPECT_THROW(GradBuckets(zero_dp, g.data(), g.size(), 16, options), UsageError);
}

// ZeRO-1 with expert ranges over the real world (dp) and an expert-dp group of the ranks of the
// same parity (ep 2): the owned ranges hold each dense element once over dp and each expert
// element once per expert-dp group; after finish() they hold the dense sums over dp and the
// expert sums over expert-dp exactly (sums of multiples of 1/256); gather_params() makes every
// rank's parameters whole.
TEST(GradBuckets, ZeroWithExpertRangesSumsEachOverItsGroup) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const int r = dp.rank();
  const MpiComm parity = MpiComm::world().split(r % 2, r);
  MpiCommunicator expert_dp(parity.get());
  const size_t n = 4099;
  const std::vector<FlatRange> experts = {{100, 1100}, {1100, 2100}, {3000, 3517}};
  const auto in_experts = [&](size_t i) {
    return std::any_of(experts.begin(), experts.end(),
                       [&](const FlatRange& e) { return i >= e.lo && i < e.hi; });
  };
  for (size_t bucket_bytes : {64u, 1000u, 1u << 20}) {
    std::vector<float> g(n), dense(n), expert(n), params(n), updated(n);
    GradSyncOptions options{.zero = true, .expert_dp = &expert_dp, .expert_ranges = experts};
    GradBuckets buckets(dp, g.data(), n, bucket_bytes, options);
    const ShardRanges owned(buckets.owned());
    std::vector<int> owners(n, 0);
    for (const FlatRange& o : owned.ranges())
      for (size_t i = o.lo; i < o.hi; ++i) owners[i] = 1;
    ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, owners.data(), static_cast<int>(n), MPI_INT, MPI_SUM,
                            MPI_COMM_WORLD),
              MPI_SUCCESS);
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(owners[i], in_experts(i) ? dp.size() / expert_dp.size() : 1) << "element " << i;
    for (size_t i = 0; i < n; ++i) dense[i] = expert[i] = grad(r, 0, i);
    MPI_Allreduce(MPI_IN_PLACE, dense.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, expert.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  parity.get());
    backward(buckets, g, 0, [&](size_t i) { return grad(r, 0, i); });
    buckets.finish();
    for (const FlatRange& o : owned.ranges())
      for (size_t i = o.lo; i < o.hi; ++i)
        ASSERT_EQ(g[i], in_experts(i) ? expert[i] : dense[i]) << "bucket " << bucket_bytes
                                                              << " element " << i;
    for (size_t i = 0; i < n; ++i) {
      updated[i] = 0.5f * dense[i] + static_cast<float>(i);
      params[i] = -1e30f * static_cast<float>(r + 1);
    }
    for (const FlatRange& o : owned.ranges())
      for (size_t i = o.lo; i < o.hi; ++i) params[i] = updated[i];
    buckets.gather_params(params.data());
    EXPECT_EQ(std::memcmp(params.data(), updated.data(), n * sizeof(float)), 0)
        << "bucket " << bucket_bytes;
  }
}

TEST(GradBuckets, OneBucketWhenLargerThanTheBuffer) {
  std::vector<float> g(10);
  RecordingComm comm(4, g.data());
  GradBuckets buckets(comm, g.data(), g.size(), 1 << 20);
  EXPECT_EQ(buckets.buckets(), 1u);
  buckets.ready_from(1);
  EXPECT_TRUE(comm.started.empty());
  buckets.ready_from(0);
  EXPECT_EQ(comm.started, (Ranges{{0, 10}}));
  buckets.finish();
  EXPECT_EQ(comm.waits, 1);
}

// ZeRO and the encoded formats start their first operation where the plain all-reduce starts
// (ready_from), and finish() completes them. n = 10 at dp 2: ZeRO ranges [0, 16) -> [0, 10) and
// [10, 10), so rank 1 has no block in any bucket.
TEST(GradBuckets, ZeroAndCompressionStartAsBackwardReachesThem) {
  using Ops = std::vector<std::string>;
  std::vector<float> g(10);
  RecordingComm zero_comm(2, g.data());
  GradBuckets zero(zero_comm, g.data(), g.size(), 16, {.zero = true});
  EXPECT_EQ(zero.owned(), (std::vector<FlatRange>{{0, 10}}));
  zero.ready_from(5);
  EXPECT_EQ(zero_comm.ops, (Ops{"reduce_scatter 6:4,0"}));
  zero.finish();
  EXPECT_EQ(zero_comm.ops,
            (Ops{"reduce_scatter 6:4,0", "reduce_scatter 2:4,0", "reduce_scatter 0:2,0"}));
  EXPECT_EQ(zero_comm.waits, 3);
  zero.gather_params(g.data());
  EXPECT_EQ(zero_comm.ops.size(), 6u);
  EXPECT_EQ(zero_comm.ops[3], "all_gather 6:4,0");
  EXPECT_EQ(zero_comm.ops[5], "all_gather 0:2,0");
  EXPECT_EQ(zero_comm.waits, 6);

  // bf16: chunks of ceil(4 / 2) = 2 values, 4 bytes; the last bucket's chunks hold 1 value each.
  RecordingComm bf16_comm(2, g.data());
  GradBuckets bf16(bf16_comm, g.data(), g.size(), 16, {.compress = GradCompress::Bf16});
  bf16.ready_from(5);
  EXPECT_EQ(bf16_comm.ops, (Ops{"all_to_all 4"}));
  EXPECT_EQ(bf16_comm.waits, 0);
  bf16.finish();
  EXPECT_EQ(bf16_comm.ops, (Ops{"all_to_all 4", "all_to_all 4", "all_to_all 2", "all_gather 4",
                                "all_gather 4", "all_gather 2"}));
  EXPECT_EQ(bf16_comm.waits, 6);

  // topk, ratio 0.25: one pair of 8 bytes per bucket (4 * 0.25 = 1; 2 * 0.25 rounds to 0 -> 1).
  RecordingComm topk_comm(2, g.data());
  GradBuckets topk(topk_comm, g.data(), g.size(), 16,
                   {.compress = GradCompress::TopK, .topk_ratio = 0.25});
  topk.ready_from(2);
  EXPECT_EQ(topk_comm.ops, (Ops{"all_gather 8", "all_gather 8"}));
  topk.finish();
  EXPECT_EQ(topk_comm.ops.size(), 3u);
  EXPECT_EQ(topk_comm.waits, 3);
}

// The plain all-reduce and ZeRO-1 leave the data to the communicator: with --device cuda the
// gradients are device memory, which the host must not read or write. Here they are memory no
// access is allowed to (PROT_NONE: a touch is a segfault), at rank 1 of 2, whose ZeRO block
// [64, 100) lies inside the bucket, not at its start.
TEST(GradBuckets, PlainAndZeroNeverTouchTheGradientsThemselves) {
  const size_t n = 100, bytes = n * sizeof(float);
  void* mapped = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mapped, MAP_FAILED);
  auto* g = static_cast<float*>(mapped);
  for (bool zero : {false, true}) {
    RecordingComm comm(2, g, 1);
    GradBuckets buckets(comm, g, n, bytes, {.zero = zero});
    EXPECT_EQ(buckets.owned().front().lo, zero ? 64u : 0u);
    buckets.ready_from(0);
    buckets.finish();
    buckets.gather_params(g);
    EXPECT_EQ(comm.waits, zero ? 2 : 1) << "zero " << zero;
  }
  munmap(mapped, bytes);
}

TEST(GradBuckets, DataParallelSizeOneMakesNoCalls) {
  std::vector<float> g(10);
  RecordingComm comm(1, g.data());
  GradBuckets buckets(comm, g.data(), g.size(), 8);
  EXPECT_EQ(buckets.buckets(), 5u);
  buckets.ready_from(3);
  buckets.ready_from(0);
  buckets.finish();
  buckets.finish();
  EXPECT_TRUE(comm.started.empty());
  EXPECT_EQ(comm.waits, 0);
}

// Several steps reuse one GradBuckets; each result is compared bitwise with MPI_Allreduce of the
// same data. Each rank sends what a ring all-reduce of its whole buffer does, once per step
// (2 (P-1) / P of it: exact here, P being 2 or 4 and every bucket a whole number of floats).
// Buckets of one and three floats stop at n 1000: at 4099 they were 16,000 collectives of a
// float or three, 8 of the test's 12 s at 4 ranks beside 3 busy loops on 2 cores (1 s alone).
// Among that many in flight Open MPI 4.1.4 twice in about 1,200 runs (3 at once on 2 cores) never
// completed one: every rank in MPI_Waitall in finish(), spinning in libnbc's progress; a fresh-
// clone make test ran past its 600 s so. The trainer's watchdog names such a hang (exit 3).
TEST(GradBuckets, EqualsAPlainAllReduce) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const int r = dp.rank();
  for (size_t n : {1u, 37u, 1000u, 4099u}) {
    for (size_t bucket_bytes : {4u, 12u, 256u, 1000u, 4096u, 1u << 20}) {
      if (n > 1000 && bucket_bytes < 256) continue;
      std::vector<float> g(n), expect(n);
      GradBuckets buckets(dp, g.data(), n, bucket_bytes);
      const size_t per = bucket_bytes / sizeof(float);
      EXPECT_EQ(buckets.buckets(), (n + per - 1) / per) << "n " << n << " bucket " << bucket_bytes;
      EXPECT_EQ(buckets.owned(), (std::vector<FlatRange>{{0, n}}));
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < n; ++i) expect[i] = grad(r, step, i);
        ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, expect.data(), static_cast<int>(n), MPI_FLOAT,
                                MPI_SUM, MPI_COMM_WORLD),
                  MPI_SUCCESS);
        dp.reset_bytes_sent();
        backward(buckets, g, step, [&](size_t i) { return grad(r, step, i); });
        buckets.finish();
        EXPECT_EQ(std::memcmp(g.data(), expect.data(), n * sizeof(float)), 0)
            << "n " << n << " bucket " << bucket_bytes << " step " << step;
        EXPECT_EQ(dp.bytes_sent(), all_reduce_bus_bytes(n * sizeof(float), dp.size()));
      }
    }
  }
}

TEST(ZeroRange, AlignedPiecesInRankOrder) {
  const FlatRange expect[] = {{0, 32}, {32, 64}, {64, 96}, {96, 100}};  // ceil(100/4) -> 32
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(zero_range(100, 4, r).lo, expect[r].lo);
    EXPECT_EQ(zero_range(100, 4, r).hi, expect[r].hi);
  }
  for (int ranks : {1, 2, 3, 4, 8})
    for (size_t n : {0u, 1u, 15u, 16u, 17u, 100u, 1000u, 4099u}) {
      const size_t per = ((n + ranks - 1) / ranks + 15) / 16 * 16;
      size_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const FlatRange own = zero_range(n, ranks, r);
        EXPECT_EQ(own.lo, next) << "n " << n << " ranks " << ranks << " rank " << r;
        EXPECT_LE(own.lo, own.hi);
        EXPECT_LE(own.hi - own.lo, per);
        EXPECT_TRUE(own.lo % 16 == 0 || own.lo == n);
        next = own.hi;
      }
      EXPECT_EQ(next, n) << "n " << n << " ranks " << ranks;
    }
}

// ZeRO-1: after finish() the own range holds exactly the plain all-reduce's values; after an
// "update" of the own range, gather_params() gives every rank the whole updated buffer. Bucket
// sizes from 1 float to all of it, most not multiples of 16: buckets straddle range boundaries,
// ranks own nothing of many buckets, and at 4 ranks n = 37 leaves rank 3 no range at all.
// Reduce-scatter + all-gather each send every block but this rank's own: what one all-reduce
// does (2 (P-1) / P of the buffer) where the ranges are even, exactly 2 (n - own) floats.
TEST(GradBuckets, ZeroEqualsAPlainAllReduce) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const int r = dp.rank();
  for (size_t n : {1u, 37u, 100u, 1000u, 4099u}) {
    for (size_t bucket_bytes : {4u, 12u, 64u, 100u, 256u, 1000u, 4096u, 1u << 20}) {
      std::vector<float> g(n), expect(n), params(n), updated(n);
      GradBuckets buckets(dp, g.data(), n, bucket_bytes, {.zero = true});
      const FlatRange own = zero_range(n, dp.size(), r);  // one range, or none
      EXPECT_EQ(buckets.owned(),
                own.size() ? std::vector<FlatRange>{own} : std::vector<FlatRange>{});
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < n; ++i) expect[i] = grad(r, step, i);
        ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, expect.data(), static_cast<int>(n), MPI_FLOAT,
                                MPI_SUM, MPI_COMM_WORLD),
                  MPI_SUCCESS);
        dp.reset_bytes_sent();
        backward(buckets, g, step, [&](size_t i) { return grad(r, step, i); });
        buckets.finish();
        const std::string what = "n " + std::to_string(n) + " bucket " +
                                 std::to_string(bucket_bytes) + " step " + std::to_string(step);
        EXPECT_EQ(std::memcmp(g.data() + own.lo, expect.data() + own.lo,
                              (own.hi - own.lo) * sizeof(float)),
                  0)
            << what;
        // The optimizer: every rank updates its own range only; the rest is stale garbage.
        for (size_t i = 0; i < n; ++i) {
          updated[i] = 0.5f * expect[i] + static_cast<float>(i);
          params[i] = i >= own.lo && i < own.hi ? updated[i] : -1e30f * static_cast<float>(r + 1);
        }
        buckets.gather_params(params.data());
        EXPECT_EQ(std::memcmp(params.data(), updated.data(), n * sizeof(float)), 0) << what;
        EXPECT_EQ(dp.bytes_sent(), 2 * (n - (own.hi - own.lo)) * sizeof(float)) << what;
      }
    }
  }
}

TEST(GradBuckets, UnsupportedOptionsAreUsageErrors) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  std::vector<float> g(64);
  EXPECT_THROW(GradBuckets(dp, g.data(), g.size(), 64, {true, GradCompress::Bf16}), UsageError);
  EXPECT_THROW(GradBuckets(dp, g.data(), g.size(), 64, {false, GradCompress::TopK, 0.0}),
               UsageError);
  EXPECT_THROW(GradBuckets(dp, g.data(), g.size(), 64, {false, GradCompress::TopK, 1.5}),
               UsageError);
  EXPECT_THROW(parse_grad_compress("fp8"), UsageError);
  for (const char* name : {"none", "bf16", "fp16", "int8", "topk"})
    EXPECT_EQ(to_string(parse_grad_compress(name)), name);
}

// The trainer's options: values and the combination ZeRO + compression checked at start-up.
TEST(GradSyncOptions, CheckedWithTheTrainersOptions) {
  auto parse = [](std::vector<const char*> flags) {
    flags.insert(flags.begin(), {"trainer", "--train-data", "x.h5"});
    return parse_options(static_cast<int>(flags.size()), flags.data()).train;
  };
  const TrainConfig defaults = parse({});
  EXPECT_EQ(defaults.zero, 0);
  EXPECT_EQ(defaults.grad_compress, "none");
  EXPECT_EQ(defaults.topk_ratio, 0.01);
  const TrainConfig t = parse({"--grad-compress", "topk", "--topk-ratio", "0.1"});
  EXPECT_EQ(t.grad_compress, "topk");
  EXPECT_EQ(t.topk_ratio, 0.1);
  EXPECT_EQ(parse({"--zero", "1"}).zero, 1);
  EXPECT_THROW(parse({"--zero", "1", "--grad-compress", "int8"}), UsageError);
  EXPECT_EQ(parse({"--zero", "3"}).zero, 3);
  EXPECT_THROW(parse({"--zero", "4"}), UsageError);  // 0..3
  EXPECT_THROW(parse({"--grad-compress", "zstd"}), UsageError);
  EXPECT_THROW(parse({"--topk-ratio", "0"}), UsageError);
  EXPECT_THROW(parse({"--topk-ratio", "1.5"}), UsageError);
}

TEST(Compression, BlocksRoundAsTheirFormatsSay) {
  const float x[] = {127.0f, -63.5f, 0.4f, 1.0f, 1.0f + 1.0f / 256, 3e-8f, 70000.0f};
  const size_t m = std::size(x);
  std::vector<std::byte> block(block_bytes(GradCompress::Bf16, m + 2));
  std::vector<float> back(m + 2), dropped(m);
  for (GradCompress c : {GradCompress::Bf16, GradCompress::Fp16}) {
    const Precision p = c == GradCompress::Bf16 ? Precision::Bf16 : Precision::Fp16;
    std::fill(block.begin(), block.end(), std::byte{0xff});
    encode_block(c, x, m, m + 2, block.data(), dropped.data());
    decode_block(c, block.data(), m + 2, m + 2, back.data());
    for (size_t i = 0; i < m; ++i) {
      EXPECT_EQ(back[i], round_to(x[i], p)) << to_string(c) << " " << x[i];
      const float d = x[i] - round_to(x[i], p);
      EXPECT_EQ(dropped[i], std::isfinite(d) ? d : 0.0f);  // fp16: 70000 -> inf, nothing kept
    }
    EXPECT_EQ(back[m], 0.0f);  // padding
    EXPECT_EQ(back[m + 1], 0.0f);
  }
  // int8: scale 127 / 127 = 1; -63.5 rounds to even (-64); the padding decodes to 0.
  const float y[] = {127.0f, -63.5f, 0.4f, 1.0f};
  std::vector<std::byte> b8(block_bytes(GradCompress::Int8, 6), std::byte{0x55});
  EXPECT_EQ(b8.size(), 4u + 6u);
  encode_block(GradCompress::Int8, y, 4, 6, b8.data(), dropped.data());
  decode_block(GradCompress::Int8, b8.data(), 6, 6, back.data());
  const float expect[] = {127.0f, -64.0f, 0.0f, 1.0f, 0.0f, 0.0f};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(back[i], expect[i]) << i;
  EXPECT_EQ(dropped[1], 0.5f);
  EXPECT_EQ(dropped[2], 0.4f);
  back.assign(6, 1.0f);
  decode_add_block(GradCompress::Int8, b8.data(), 6, 6, back.data());
  EXPECT_EQ(back[0], 128.0f);
  // A non-finite value: the whole block decodes to NaN, and nothing is kept as residual.
  const float z[] = {1.0f, std::numeric_limits<float>::infinity()};
  encode_block(GradCompress::Int8, z, 2, 2, b8.data(), dropped.data());
  decode_block(GradCompress::Int8, b8.data(), 2, 2, back.data());
  EXPECT_TRUE(std::isnan(back[0]) && std::isnan(back[1]));
  EXPECT_EQ(dropped[0], 0.0f);
  EXPECT_EQ(dropped[1], 0.0f);
  // One scale per group of kInt8Group values: a group of large values leaves the small ones of
  // the next group their own scale. 600 values in a block of 700: 2 scales, then 700 bytes.
  std::vector<float> w(600), wb(600);
  // Scales 127 / 127 = 1 and 127 * 2^-10 / 127 = 2^-10: every value is exact.
  for (size_t i = 0; i < w.size(); ++i) w[i] = i < kInt8Group ? 127.0f : std::ldexp(i % 128, -10);
  w.back() = std::ldexp(127.0f, -10);
  std::vector<std::byte> groups(block_bytes(GradCompress::Int8, 700));
  EXPECT_EQ(groups.size(), 2 * 4 + 700u);
  encode_block(GradCompress::Int8, w.data(), w.size(), 700, groups.data(), nullptr);
  decode_block(GradCompress::Int8, groups.data(), w.size(), 700, wb.data());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(wb[i], w[i]) << i;
}

TEST(Compression, TopkKeepsTheLargestMagnitudes) {
  float x[] = {0.5f, -4.0f, 3.0f, 4.0f, -0.25f, 2.0f};
  uint32_t scratch[6];
  TopkPair kept[3];
  EXPECT_EQ(topk_count(6, 0.5), 3u);
  EXPECT_EQ(topk_count(1000, 0.01), 10u);
  EXPECT_EQ(topk_count(10, 0.01), 1u);  // at least one
  EXPECT_EQ(topk_count(10, 1.0), 10u);
  take_topk(x, 6, 3, scratch, kept);
  // |-4| = |4| (tie: lower index first), then 3; in index order.
  EXPECT_EQ(kept[0].index, 1u);
  EXPECT_EQ(kept[0].value, -4.0f);
  EXPECT_EQ(kept[1].index, 2u);
  EXPECT_EQ(kept[2].index, 3u);
  const float left[] = {0.5f, 0.0f, 0.0f, 0.0f, -0.25f, 2.0f};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(x[i], left[i]) << i;
}

// One step of each encoded format against the exact sum S (double) of the ranks' gradients g_r,
// with u the format's unit roundoff (bf16 2^-8, fp16 2^-11) and A = sum_r |g_r|:
//   out = round(T), T = fp32 sum of round(g_r) (dp - 1 additions of 2^-24 each), so
//   |T - S| <= E1 = u A + (dp - 1) 2^-24 (1 + u) A and |out - S| <= u |S| + (1 + u) E1,
//   plus, for fp16, 2^-25 absolute per rounding (subnormals below 2^-14).
// int8, scale per chunk s = max|x| / 127, error at most s / 2 per quantisation: |out - S| <=
//   (sum_r max|g_r| + max|T|) / 254, with max over the whole buffer (>= each chunk's) and
//   max|T| <= max|S| + sum_r max|g_r| / 254, plus fp32 rounding 2^-22 (A + |S|).
// Every rank must end with the same bits, and bf16 / fp16 results must be values of the format.
TEST(GradBuckets, EncodedSumsWithinTheirFormatsError) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const int r = dp.rank(), ranks = dp.size();
  const size_t n = 4099;
  for (GradCompress c : {GradCompress::Bf16, GradCompress::Fp16, GradCompress::Int8}) {
    for (size_t bucket_bytes : {400u, 4096u, 1u << 20}) {
      std::vector<float> g(n);
      GradBuckets buckets(dp, g.data(), n, bucket_bytes, {.compress = c});
      const std::vector<float> mine = noisy(n, r, 0);
      std::vector<float> magnitude(n);
      for (size_t i = 0; i < n; ++i) magnitude[i] = std::fabs(mine[i]);
      const std::vector<double> S = exact_sum(mine), A = exact_sum(magnitude);
      double max_g = *std::max_element(magnitude.begin(), magnitude.end()), max_s = 0;
      ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, &max_g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
                MPI_SUCCESS);  // sum over ranks of each rank's max
      for (double v : S) max_s = std::max(max_s, std::fabs(v));
      backward(buckets, g, 0, [&](size_t i) { return mine[i]; });
      buckets.finish();
      EXPECT_TRUE(same_on_every_rank(g)) << to_string(c);
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        double tol;
        if (c == GradCompress::Int8) {
          // max|T| <= max|S| + max_g / 254; 1e-6 of the scale for rounding x * (127 / max).
          tol = (max_g * (1 + 1.0 / 254) + max_s) * (1.0 / 254 + 1e-6) +
                std::ldexp(A[i] + std::fabs(S[i]), -22);
        } else {
          const double u = std::ldexp(1.0, c == GradCompress::Bf16 ? -8 : -11);
          const double e1 = u * A[i] + (ranks - 1) * std::ldexp(1.0, -24) * (1 + u) * A[i];
          tol = u * std::fabs(S[i]) + (1 + u) * e1;
          if (c == GradCompress::Fp16) tol += (ranks + 1) * std::ldexp(1.0, -25);
          const Precision p = c == GradCompress::Bf16 ? Precision::Bf16 : Precision::Fp16;
          ASSERT_EQ(g[i], round_to(g[i], p)) << to_string(c) << " i " << i;
        }
        ASSERT_LE(std::fabs(g[i] - S[i]), tol)
            << to_string(c) << " bucket " << bucket_bytes << " i " << i << " sum " << S[i];
        differ += g[i] != static_cast<float>(S[i]);
      }
      EXPECT_GT(differ, n / 4) << to_string(c) << ": compression changed nothing?";
    }
  }
}

// Error feedback: over T steps of changing gradients, what the sync delivered plus what the
// residuals still hold (all ranks') equals the sum of all gradients, up to fp32 rounding of the
// additions and subtractions along the way: 2^-24 per operation, a few per value and step, on
// values bounded by G_i = sum over steps and ranks of |g| (topk: a dropped value can grow to
// that) plus, for int8, the quantisation residuals (<= s / 2 each, s <= max|g| + residual):
//   |delivered + residuals - sum g| <= 2^-24 * 4 (dp + 2) T (G_i + dp max|g|).
// The residuals must hold something (else the test shows nothing), and the same bits on every rank.
TEST(GradBuckets, ErrorFeedbackDeliversEverything) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const int r = dp.rank(), ranks = dp.size(), steps = 8;
  const size_t n = 3001;
  struct Mode {
    GradCompress c;
    double ratio;
  };
  for (const Mode mode : {Mode{GradCompress::Int8, 0}, Mode{GradCompress::TopK, 0.01},
                          Mode{GradCompress::TopK, 0.2}}) {
    for (size_t bucket_bytes : {1000u, 1u << 20}) {
      std::vector<float> g(n);
      GradBuckets buckets(dp, g.data(), n, bucket_bytes, {false, mode.c, mode.ratio});
      std::vector<double> delivered(n, 0.0), truth(n, 0.0), bound(n, 0.0);
      double max_g = 0;
      for (int step = 0; step < steps; ++step) {
        const std::vector<float> mine = noisy(n, r, step);
        std::vector<float> magnitude(n);
        for (size_t i = 0; i < n; ++i) {
          magnitude[i] = std::fabs(mine[i]);
          max_g = std::max(max_g, static_cast<double>(magnitude[i]));
        }
        const std::vector<double> S = exact_sum(mine), A = exact_sum(magnitude);
        backward(buckets, g, step, [&](size_t i) { return mine[i]; });
        buckets.finish();
        ASSERT_TRUE(same_on_every_rank(g));
        for (size_t i = 0; i < n; ++i) {
          delivered[i] += g[i];
          truth[i] += S[i];
          bound[i] += A[i];
        }
      }
      ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, &max_g, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
                MPI_SUCCESS);
      std::vector<float> residual(n, 0.0f);
      buckets.add_residuals(residual.data());
      const std::vector<double> R = exact_sum(residual);
      double held = 0;
      for (size_t i = 0; i < n; ++i) {
        held += std::fabs(R[i]);
        const double tol = std::ldexp(4.0 * (ranks + 2) * steps * (bound[i] + ranks * max_g), -24);
        ASSERT_LE(std::fabs(delivered[i] + R[i] - truth[i]), tol)
            << to_string(mode.c) << " ratio " << mode.ratio << " bucket " << bucket_bytes << " i "
            << i << " delivered " << delivered[i] << " residual " << R[i] << " true " << truth[i];
      }
      EXPECT_GT(held, 0.0) << to_string(mode.c);
    }
  }
}

// Bytes on the wire per step (comm/bus_bytes.hpp), as the formats imply: fp32 4 per float, of
// which a ring all-reduce sends 2 (P-1) / P (ZeRO's reduce-scatter + all-gather the same); bf16 /
// fp16 2 per float, the all-to-all and the all-gather each sending P-1 of P chunks, so half of
// fp32 at every P; int8 1 plus a 4-byte scale per 512 values (here one per chunk); topk 8 per
// kept value, all-gathered to P-1 ranks. n and buckets divisible by dp: no padding.
TEST(GradBuckets, BytesSentAreWhatTheFormatImplies) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const size_t ranks = static_cast<size_t>(dp.size());
  const size_t n = 3 * 1024, bucket_floats = 1024;  // 3 buckets
  std::vector<float> g(n);
  const std::vector<float> mine = noisy(n, dp.rank(), 0);
  auto bytes = [&](GradSyncOptions options) {
    GradBuckets buckets(dp, g.data(), n, bucket_floats * sizeof(float), options);
    EXPECT_EQ(buckets.buckets(), 3u);
    dp.reset_bytes_sent();
    backward(buckets, g, 0, [&](size_t i) { return mine[i]; });
    buckets.finish();
    buckets.gather_params(g.data());  // zero: the other half of its traffic
    return dp.bytes_sent();
  };
  const uint64_t fp32 = bytes({});
  EXPECT_EQ(fp32, 2 * (ranks - 1) * n * 4 / ranks);
  EXPECT_EQ(bytes({.zero = true}), fp32);
  EXPECT_EQ(bytes({.compress = GradCompress::Bf16}), fp32 / 2);
  EXPECT_EQ(bytes({.compress = GradCompress::Fp16}), fp32 / 2);
  EXPECT_EQ(bytes({.compress = GradCompress::Int8}), fp32 / 4 + 3 * 2 * (ranks - 1) * 4);
  EXPECT_EQ(bytes({.compress = GradCompress::TopK, .topk_ratio = 0.01}), 3 * 10 * 8 * (ranks - 1));
  EXPECT_EQ(bytes({.compress = GradCompress::TopK, .topk_ratio = 0.25}), 3 * 256 * 8 * (ranks - 1));
}

// Uneven sizes pad the last chunks: the all-to-all and the all-gather each send dp - 1 chunks of
// ceil(len / dp) per bucket.
TEST(GradBuckets, BytesSentCountThePadding) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const size_t ranks = static_cast<size_t>(dp.size());
  const size_t n = 1001, per = 301;  // buckets of 301, 301, 301 and 98 floats
  std::vector<float> g(n, 1.0f);
  size_t bf16 = 0, int8 = 0;
  for (size_t len : {301u, 301u, 301u, 98u}) {
    const size_t c = (len + ranks - 1) / ranks;
    bf16 += 2 * (ranks - 1) * c * 2;
    int8 += 2 * (ranks - 1) * (c + 4);
  }
  for (GradCompress c : {GradCompress::Bf16, GradCompress::Int8}) {
    GradBuckets buckets(dp, g.data(), n, per * sizeof(float), {.compress = c});
    EXPECT_EQ(buckets.buckets(), 4u);
    dp.reset_bytes_sent();
    buckets.finish();
    EXPECT_EQ(dp.bytes_sent(), c == GradCompress::Bf16 ? bf16 : int8) << to_string(c);
  }
}

// Calls the communicator does not split refuse what one MPI call cannot take.
TEST(MpiCommunicator, UnsplitCallsRejectCountsAboveTheLimit) {
  MpiCommunicator small(MPI_COMM_WORLD, 8);
  std::vector<std::byte> in(9 * small.size()), out(in.size());
  EXPECT_THROW(small.all_to_all_start(in.data(), out.data(), 9), Error);
  EXPECT_THROW(small.all_gather_start(in.data(), out.data(), 9), Error);
  std::vector<size_t> counts(small.size(), 5);
  std::vector<float> data(5 * small.size());
  EXPECT_THROW(small.reduce_scatter_start(data.data(), counts, ReduceOp::Sum), Error);  // 5 dp > 8
  counts.pop_back();
  EXPECT_THROW(small.all_gather_start(data.data(), counts), Error);  // one count too few
}
