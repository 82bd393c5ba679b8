// ranks: 2 4
// Bucketed data-parallel gradient sync: which all-reduces start when, and that the result is
// exactly a plain all-reduce of the whole buffer.
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/parallel/grad_sync.hpp"

using namespace mpitrain;

namespace {

// Records the non-blocking all-reduces started on it as (offset into base, count).
class RecordingComm final : public Communicator {
 public:
  RecordingComm(int size, const float* base) : size_(size), base_(base) {}
  std::vector<std::pair<size_t, size_t>> started;
  int waits = 0;

  int rank() const override { return 0; }
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
  void broadcast(void*, size_t, int) override { unexpected(); }
  void barrier() override { unexpected(); }
  void all_gather(const float*, float*, size_t) override { unexpected(); }
  void reduce_scatter(const float*, float*, size_t, ReduceOp) override { unexpected(); }
  CommHandle send_start(const float*, size_t, int, int) override { unexpected(); }
  CommHandle recv_start(float*, size_t, int, int) override { unexpected(); }
  double blocked_seconds() const override { return 0; }
  void reset_blocked_seconds() override {}

 private:
  [[noreturn]] static void unexpected() { throw Error("GradBuckets made an unexpected call"); }
  int size_;
  const float* base_;
};

using Ranges = std::vector<std::pair<size_t, size_t>>;

// Multiples of 1/256 below 64 in magnitude: sums over up to 8 ranks are exact in float, so the
// comparison below is bitwise whatever order MPI's algorithms add in.
float grad(int rank, int step, size_t i) {
  const int k = static_cast<int>((i * 2654435761u + rank * 977 + step * 131) % 32768) - 16384;
  return static_cast<float>(k) / 256.0f;
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

// Backward is simulated: gradients are written from the end in irregular pieces, and after each
// piece ready_from(its start); what is not written yet holds garbage. Several steps reuse one
// GradBuckets. Each result is compared bitwise with MPI_Allreduce of the same data.
TEST(GradBuckets, EqualsAPlainAllReduce) {
  MpiCommunicator dp(MPI_COMM_WORLD);
  const int r = dp.rank();
  for (size_t n : {1u, 37u, 1000u, 4099u}) {
    for (size_t bucket_bytes : {4u, 12u, 256u, 1000u, 4096u, 1u << 20}) {
      std::vector<float> g(n), expect(n);
      GradBuckets buckets(dp, g.data(), n, bucket_bytes);
      const size_t per = bucket_bytes / sizeof(float);
      EXPECT_EQ(buckets.buckets(), (n + per - 1) / per) << "n " << n << " bucket " << bucket_bytes;
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < n; ++i) expect[i] = grad(r, step, i);
        ASSERT_EQ(MPI_Allreduce(MPI_IN_PLACE, expect.data(), static_cast<int>(n), MPI_FLOAT,
                                MPI_SUM, MPI_COMM_WORLD),
                  MPI_SUCCESS);
        std::fill(g.begin(), g.end(), 1e30f);  // not yet computed
        // Step 1 writes everything at once and calls no ready_from at all.
        if (step == 1) {
          for (size_t i = 0; i < n; ++i) g[i] = grad(r, step, i);
        } else {
          size_t offset = n;
          for (size_t piece = 1; offset > 0; piece = piece * 3 % 23 + 1) {
            const size_t from = offset - std::min(offset, piece * (step + 1));
            for (size_t i = from; i < offset; ++i) g[i] = grad(r, step, i);
            offset = from;
            buckets.ready_from(offset);
            if (piece % 2) buckets.ready_from(offset);  // repeated calls change nothing
          }
        }
        buckets.finish();
        EXPECT_EQ(std::memcmp(g.data(), expect.data(), n * sizeof(float)), 0)
            << "n " << n << " bucket " << bucket_bytes << " step " << step;
      }
    }
  }
}
