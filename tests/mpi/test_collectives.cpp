// ranks: 2 4
// The communicator and the set-up error agreement on real MPI ranks.
#include <gtest/gtest.h>

#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/runtime/agree.hpp"

using namespace mpitrain;

TEST(MpiCommunicator, AllReduceSumMaxMin) {
  MpiCommunicator comm(MpiComm::world());
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

TEST(MpiCommunicator, BroadcastFromAnyRoot) {
  MpiCommunicator comm(MpiComm::world());
  const int root = comm.size() - 1;
  std::vector<char> buf(5, comm.rank() == root ? 'x' : 'o');
  comm.broadcast(buf.data(), buf.size(), root);
  EXPECT_EQ(std::string(buf.begin(), buf.end()), "xxxxx");
}

TEST(AllOrNone, OneFailingRankStopsEveryRankWithItsMessage) {
  const MpiComm world = MpiComm::world();
  const int bad = world.size() - 1;
  try {
    all_or_none(world, [&] {
      if (world.rank() == bad) throw UsageError("rank " + std::to_string(bad) + " found a bad file");
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
