// ranks: 2 4
// The communicator and the set-up error agreement on real MPI ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/runtime/agree.hpp"

using namespace mpitrain;

TEST(MpiCommunicator, AllReduceSumMaxMin) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  std::vector<float> f = {1.0f * r, 2.0f};
  comm.all_reduce(f.data(), f.size(), ReduceOp::Sum);
  EXPECT_EQ(f[0], n * (n - 1) / 2.0f);
  EXPECT_EQ(f[1], 2.0f * n);
  double d = r;
  comm.all_reduce(&d, 1, ReduceOp::Max);
  EXPECT_EQ(d, n - 1);
  int64_t i = 10 + r;
  comm.all_reduce(&i, 1, ReduceOp::Min);
  EXPECT_EQ(i, 10);
}

// Each value with its own operation, in one call: rank r gives r + 1 (and -(r + 1)) to each.
TEST(MpiCommunicator, AllReduceEachAppliesEachValuesOwnOperation) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int p = comm.size();
  const double r = comm.rank() + 1;
  double data[5] = {r, r, r, -r, 0.5 * r};
  const ReduceOp ops[5] = {ReduceOp::Max, ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max,
                           ReduceOp::Sum};
  comm.all_reduce_each(data, ops, 5);
  EXPECT_EQ(data[0], p);
  EXPECT_EQ(data[1], p * (p + 1) / 2.0);
  EXPECT_EQ(data[2], 1.0);
  EXPECT_EQ(data[3], -1.0);
  EXPECT_EQ(data[4], p * (p + 1) / 4.0);
  double many[MpiCommunicator::kMaxEach + 1] = {};
  const ReduceOp sums[MpiCommunicator::kMaxEach + 1] = {};
  EXPECT_THROW(comm.all_reduce_each(many, sums, MpiCommunicator::kMaxEach + 1), Error);
}

TEST(MpiCommunicator, BroadcastFromAnyRoot) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int root = comm.size() - 1;
  std::vector<char> buf(5, comm.rank() == root ? 'x' : 'o');
  comm.broadcast(buf.data(), buf.size(), root);
  EXPECT_EQ(std::string(buf.begin(), buf.end()), "xxxxx");
}

namespace {

// Small integers: every sum is exact, so results compare with ==.
float value(int rank, size_t i) {
  return static_cast<float>(static_cast<int>((rank * 7 + i) % 13) - 6);
}

}  // namespace

// max_count 3 makes every call below go in several MPI pieces; kMaxMpiCount in one.
class Split : public ::testing::TestWithParam<size_t> {};
INSTANTIATE_TEST_SUITE_P(MaxCount, Split, ::testing::Values(MpiCommunicator::kMaxMpiCount, 3));

TEST_P(Split, AllGatherOutOfPlaceAndInPlace) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int r = comm.rank(), n = comm.size();
  for (size_t count : {0, 1, 7}) {
    std::vector<float> in(count), out(n * count, -99), expect(n * count);
    for (size_t i = 0; i < count; ++i) in[i] = value(r, i);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i) expect[q * count + i] = value(q, i);
    comm.all_gather(in.data(), out.data(), count);
    EXPECT_EQ(out, expect) << "count " << count;
    std::vector<float> buf(n * count, -99);
    std::copy(in.begin(), in.end(), buf.begin() + r * count);
    comm.all_gather(buf.data() + r * count, buf.data(), count);
    EXPECT_EQ(buf, expect) << "in place, count " << count;
  }
}

TEST_P(Split, ReduceScatterOutOfPlaceAndInPlace) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int r = comm.rank(), n = comm.size();
  for (size_t count : {0, 1, 7}) {
    std::vector<float> in(n * count), out(count, -99), expect(count, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = value(r, i);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < count; ++i) expect[i] += value(q, r * count + i);
    const std::vector<float> copy = in;
    comm.reduce_scatter(in.data(), out.data(), count, ReduceOp::Sum);
    EXPECT_EQ(out, expect) << "count " << count;
    EXPECT_EQ(in, copy) << "out of place must leave the input alone";
    comm.reduce_scatter(in.data(), in.data() + r * count, count, ReduceOp::Sum);
    EXPECT_EQ(std::vector<float>(in.begin() + r * count, in.begin() + (r + 1) * count), expect)
        << "in place, count " << count;
  }
  std::vector<float> in(n * 2), out(2);
  for (int q = 0; q < n; ++q) in[q * 2] = in[q * 2 + 1] = static_cast<float>(r + q);
  comm.reduce_scatter(in.data(), out.data(), 2, ReduceOp::Max);
  EXPECT_EQ(out, std::vector<float>(2, static_cast<float>(n - 1 + r)));
}

// The started, uneven form ZeRO-1 uses: each rank's block of the sum lands at its own offset
// (rank 1's block empty beyond 2 ranks; two calls in flight at once, waited in the other
// order).
TEST(MpiCommunicator, UnevenReduceScatterLeavesEachBlockAtItsOffset) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  std::vector<size_t> counts(n);
  for (int q = 0; q < n; ++q) counts[q] = q == 1 && n > 2 ? 0 : 5 + 3 * q;
  size_t total = 0, offset = 0;
  for (int q = 0; q < n; ++q) {
    if (q < r) offset += counts[q];
    total += counts[q];
  }
  std::vector<float> sum(total), max(total), expect_sum(counts[r], 0), expect_max(counts[r], -99);
  for (size_t i = 0; i < total; ++i) sum[i] = max[i] = value(r, i);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < counts[r]; ++i) {
      expect_sum[i] += value(q, offset + i);
      expect_max[i] = std::max(expect_max[i], value(q, offset + i));
    }
  const CommHandle hs = comm.reduce_scatter_start(sum.data(), counts, ReduceOp::Sum);
  const CommHandle hm = comm.reduce_scatter_start(max.data(), counts, ReduceOp::Max);
  comm.progress();
  comm.wait(hm);
  comm.wait(hs);
  EXPECT_EQ(std::vector<float>(sum.begin() + offset, sum.begin() + offset + counts[r]), expect_sum);
  EXPECT_EQ(std::vector<float>(max.begin() + offset, max.begin() + offset + counts[r]), expect_max);
}

// The uneven all-to-all as expert parallelism uses it: the counts exchanged first (an
// all_to_all of them), then the blocks; rank r sends (r + 2q) % 3 floats to rank q (0, 1 or 2:
// zero blocks included, and a rank may receive nothing from another), each naming (from, to, i).
TEST(MpiCommunicator, UnevenAllToAllWithCountsExchangedFirst) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  const int r = comm.rank(), n = comm.size();
  auto count = [](int from, int to) { return static_cast<size_t>((from + 2 * to) % 3); };
  auto tag = [](int from, int to, size_t i) { return static_cast<float>(100 * from + 10 * to + i); };
  std::vector<size_t> send(n), recv(n), send_bytes(n), recv_bytes(n);
  std::vector<float> in;
  for (int q = 0; q < n; ++q) {
    send[q] = count(r, q);
    send_bytes[q] = send[q] * sizeof(float);
    for (size_t i = 0; i < send[q]; ++i) in.push_back(tag(r, q, i));
  }
  comm.wait(comm.all_to_all_start(send.data(), recv.data(), sizeof(size_t)));
  std::vector<float> expect;
  for (int q = 0; q < n; ++q) {
    EXPECT_EQ(recv[q], count(q, r)) << "count from rank " << q;
    recv_bytes[q] = recv[q] * sizeof(float);
    for (size_t i = 0; i < recv[q]; ++i) expect.push_back(tag(q, r, i));
  }
  std::vector<float> out(expect.size(), -1);
  comm.reset_bytes_sent();
  comm.wait(comm.all_to_allv_start(in.data(), send_bytes, out.data(), recv_bytes));
  EXPECT_EQ(out, expect);
  EXPECT_EQ(comm.bytes_sent(), (in.size() - send[r]) * sizeof(float));  // all but its own block
  // every count 0: nothing moves, and the call still completes on every rank
  const std::vector<size_t> zeros(n, 0);
  comm.wait(comm.all_to_allv_start(in.data(), zeros, out.data(), zeros));
  EXPECT_THROW(comm.all_to_allv_start(in.data(), std::vector<size_t>(n + 1), out.data(), zeros),
               Error);  // one count per rank
}

TEST_P(Split, BlockingAllReduceAndBroadcast) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int r = comm.rank(), n = comm.size();
  std::vector<double> d(10, r);
  comm.all_reduce(d.data(), d.size(), ReduceOp::Sum);
  EXPECT_EQ(d, std::vector<double>(10, n * (n - 1) / 2.0));
  std::vector<int64_t> i(5, r);
  comm.all_reduce(i.data(), i.size(), ReduceOp::Max);
  EXPECT_EQ(i, std::vector<int64_t>(5, n - 1));
  std::string text = r == 1 ? "from rank one" : "?????????????";
  comm.broadcast(text.data(), text.size(), 1);
  EXPECT_EQ(text, "from rank one");
}

TEST_P(Split, NonBlockingAllReduceAndRing) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int r = comm.rank(), n = comm.size();
  const size_t count = 11;
  for (int step = 0; step < 3; ++step) {  // handles are reused across steps
    std::vector<float> a(count), b(count), sent(count), got(count, -99), sum_a(count, 0);
    for (size_t i = 0; i < count; ++i) {
      a[i] = sent[i] = value(r + step, i);
      b[i] = value(r, i + step);
      for (int q = 0; q < n; ++q) sum_a[i] += value(q + step, i);
    }
    const CommHandle ha = comm.all_reduce_start(a.data(), count, ReduceOp::Sum);
    const CommHandle hr = comm.recv_start(got.data(), count, (r - 1 + n) % n, 5);
    const CommHandle hs = comm.send_start(sent.data(), count, (r + 1) % n, 5);
    const CommHandle hb = comm.all_reduce_start(b.data(), count, ReduceOp::Min);
    EXPECT_EQ(std::set<int>({ha.id, hr.id, hs.id, hb.id}).size(), 4u);
    EXPECT_LT(std::max({ha.id, hr.id, hs.id, hb.id}), 4) << "slots are reused, not added";
    comm.wait(hb);
    comm.wait(hs);
    comm.wait(ha);
    comm.wait(hr);
    EXPECT_EQ(a, sum_a);
    for (size_t i = 0; i < count; ++i) {
      float lowest = value(0, i + step);
      for (int q = 1; q < n; ++q) lowest = std::min(lowest, value(q, i + step));
      EXPECT_EQ(b[i], lowest);
      EXPECT_EQ(got[i], value((r - 1 + n) % n + step, i));
    }
  }
}

// 2-byte tensors (bf16 / fp16 bits): the sum of small integers is exact in both types, so it
// compares with == whatever order MPI adds in; with 2 ranks, a sum that lies halfway between two
// values of the type rounds to the even one (1 + 1.5 ulp -> 1 + 2 ulp), as round(a + b) does.
// Point-to-point and the uneven all-gather move the bits unchanged.
TEST_P(Split, TwoByteAllReduceSendRecvAndAllGather) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int r = comm.rank(), n = comm.size();
  const size_t count = 11;
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    const auto bits = [p](float x) { return p == Precision::Bf16 ? to_bf16_bits(x) : to_fp16_bits(x); };
    const auto value_of = [p](uint16_t h) {
      return p == Precision::Bf16 ? from_bf16_bits(h) : from_fp16_bits(h);
    };
    std::vector<uint16_t> x(count);
    for (size_t i = 0; i < count; ++i) x[i] = bits(value(r, i));
    comm.all_reduce(x.data(), count, p, ReduceOp::Sum);
    for (size_t i = 0; i < count; ++i) {
      float sum = 0;
      for (int q = 0; q < n; ++q) sum += value(q, i);
      EXPECT_EQ(value_of(x[i]), sum) << to_string(p) << " element " << i;
    }
    if (n == 2) {
      const float ulp = p == Precision::Bf16 ? 0x1p-7f : 0x1p-10f;
      uint16_t tie = bits(r == 0 ? 1.0f + ulp : ulp / 2);
      comm.all_reduce(&tie, 1, p, ReduceOp::Sum);
      EXPECT_EQ(value_of(tie), 1.0f + 2 * ulp) << to_string(p);
    }
  }
  EXPECT_THROW(comm.all_reduce(std::vector<uint16_t>(1).data(), 1, Precision::Bf16, ReduceOp::Max),
               Error);
  std::vector<uint16_t> sent(count), got(count, 0);
  for (size_t i = 0; i < count; ++i) sent[i] = static_cast<uint16_t>(0x8001u + 977u * i + r);
  const CommHandle hr = comm.recv_start(got.data(), count, (r - 1 + n) % n, 6);
  const CommHandle hs = comm.send_start(sent.data(), count, (r + 1) % n, 6);
  comm.wait(hs);
  comm.wait(hr);
  for (size_t i = 0; i < count; ++i)
    EXPECT_EQ(got[i], static_cast<uint16_t>(0x8001u + 977u * i + (r - 1 + n) % n));
  std::vector<size_t> counts(n);
  size_t total = 0, mine = 0;
  for (int q = 0; q < n; ++q) {
    counts[q] = q + 1;  // rank q's block: q + 1 elements
    if (q < r) mine += counts[q];
    total += counts[q];
  }
  std::vector<uint16_t> gathered(total, 0);
  for (size_t k = 0; k < counts[r]; ++k) gathered[mine + k] = static_cast<uint16_t>(0xabc0u + r);
  MpiCommunicator unsplit(MPI_COMM_WORLD);  // the uneven all-gather is not split
  unsplit.wait(unsplit.all_gather_start(gathered.data(), counts));
  size_t at = 0;
  for (int q = 0; q < n; ++q)
    for (size_t k = 0; k < counts[q]; ++k) EXPECT_EQ(gathered[at++], 0xabc0u + q);
}

// The blocking 2-byte forms sequence parallelism uses: the gather moves bits, in place too; the
// reduce-scatter sums small integers exactly (each rank's block), rounds a 2-rank tie to even as
// round(a + b) does, and refuses anything but a bf16 / fp16 Sum.
TEST_P(Split, TwoByteAllGatherAndReduceScatter) {
  MpiCommunicator comm(MPI_COMM_WORLD, GetParam());
  const int r = comm.rank(), n = comm.size();
  const size_t count = 7;
  std::vector<uint16_t> mine(count), out(n * count, 0), expect(n * count);
  for (size_t i = 0; i < count; ++i) mine[i] = static_cast<uint16_t>(0x8001u + 977u * i + r);
  for (int q = 0; q < n; ++q)
    for (size_t i = 0; i < count; ++i)
      expect[q * count + i] = static_cast<uint16_t>(0x8001u + 977u * i + q);
  comm.all_gather(mine.data(), out.data(), count);
  EXPECT_EQ(out, expect);
  std::vector<uint16_t> buf(n * count, 0);
  std::copy(mine.begin(), mine.end(), buf.begin() + r * count);
  comm.all_gather(buf.data() + r * count, buf.data(), count);
  EXPECT_EQ(buf, expect) << "in place";
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    const auto bits = [p](float x) { return p == Precision::Bf16 ? to_bf16_bits(x) : to_fp16_bits(x); };
    const auto value_of = [p](uint16_t h) {
      return p == Precision::Bf16 ? from_bf16_bits(h) : from_fp16_bits(h);
    };
    std::vector<uint16_t> in(n * count), sum(count, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = bits(value(r, i));
    comm.reduce_scatter(in.data(), sum.data(), count, p, ReduceOp::Sum);
    for (size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int q = 0; q < n; ++q) expected += value(q, r * count + i);
      EXPECT_EQ(value_of(sum[i]), expected) << to_string(p) << " element " << i;
    }
    if (n == 2) {
      const float ulp = p == Precision::Bf16 ? 0x1p-7f : 0x1p-10f;
      const uint16_t term = bits(r == 0 ? 1.0f + ulp : ulp / 2);
      std::vector<uint16_t> ties(2, term);
      uint16_t tie = 0;
      comm.reduce_scatter(ties.data(), &tie, 1, p, ReduceOp::Sum);
      EXPECT_EQ(value_of(tie), 1.0f + 2 * ulp) << to_string(p);
    }
  }
  std::vector<uint16_t> in(n), one(1);
  EXPECT_THROW(comm.reduce_scatter(in.data(), one.data(), 1, Precision::Bf16, ReduceOp::Max), Error);
}

TEST(MpiCommunicator, WaitOnAHandleNotPendingThrows) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  EXPECT_THROW(comm.wait(CommHandle{}), Error);
  float x = 1;
  const CommHandle h = comm.all_reduce_start(&x, 1, ReduceOp::Sum);
  comm.wait(h);
  EXPECT_THROW(comm.wait(h), Error);
  EXPECT_EQ(x, comm.size());
}

TEST(MpiCommunicator, BlockedSecondsCountsBlockingCallsAndWaits) {
  MpiCommunicator comm(MPI_COMM_WORLD);
  EXPECT_EQ(comm.blocked_seconds(), 0);
  // The last rank arrives late: every other rank blocks in the barrier for about that long.
  if (comm.rank() == comm.size() - 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comm.barrier();
  if (comm.rank() != comm.size() - 1) {
    EXPECT_GT(comm.blocked_seconds(), 0.03);
  }
  comm.reset_blocked_seconds();
  EXPECT_EQ(comm.blocked_seconds(), 0);
  float x = 1;
  if (comm.rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const CommHandle h = comm.all_reduce_start(&x, 1, ReduceOp::Sum);
  EXPECT_EQ(comm.blocked_seconds(), 0) << "starting does not block";
  comm.wait(h);
  if (comm.rank() != 0) {
    EXPECT_GT(comm.blocked_seconds(), 0.03);
  }
  EXPECT_GT(comm.blocked_seconds(), 0);
}

TEST(MpiCommunicator, ViewsASubCommunicatorWithoutOwningIt) {
  const MpiComm world = MpiComm::world();
  const MpiComm half = world.split(world.rank() % 2, world.rank());
  {
    MpiCommunicator comm(half.get());
    EXPECT_EQ(comm.mpi(), half.get());
    EXPECT_EQ(comm.size(), half.size());
    EXPECT_EQ(comm.rank(), world.rank() / 2);
    int64_t color = world.rank() % 2;
    comm.all_reduce(&color, 1, ReduceOp::Sum);
    EXPECT_EQ(color, (world.rank() % 2) * half.size());
  }
  int size = 0;
  EXPECT_EQ(MPI_Comm_size(half.get(), &size), MPI_SUCCESS) << "still usable after the view";
  EXPECT_EQ(size, half.size());
}

TEST(AllOrNone, OneFailingRankStopsEveryRankWithItsMessage) {
  const MpiComm world = MpiComm::world();
  const int bad = world.size() - 1;
  try {
    all_or_none(world, [&] {
      if (world.rank() == bad)
        throw UsageError("rank " + std::to_string(bad) + " found a bad file");
    });
    FAIL() << "expected every rank to throw";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "rank " + std::to_string(bad) + " found a bad file");
  }
  // Other errors keep their kind too, and the lowest failing rank speaks.
  try {
    all_or_none(world, [&] { throw Error("from rank " + std::to_string(world.rank())); });
    FAIL();
  } catch (const UsageError&) {
    FAIL() << "kind changed";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "from rank 0");
  }
  EXPECT_NO_THROW(all_or_none(world, [] {}));
}
