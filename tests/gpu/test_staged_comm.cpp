// ranks: 2
// StagedMpiCommunicator (MPI through pinned host buffers) against MpiCommunicator, every
// operation, with the ranks sharing one GPU (or each on its own, where there are enough); the
// staging limits throw with what to raise; a started call takes the smallest free buffer it fits.
#include <cuda_runtime_api.h>

#include "comm_checks.hpp"
#include "mpitrain/comm/staged_communicator.hpp"

using namespace mpitrain;
using comm_checks::DeviceVec;
using comm_checks::Stream;

TEST(StagedComm, EveryOperationAsMpi) {
  Stream compute;
  MpiCommunicator world(MPI_COMM_WORLD, "world"), reference(MPI_COMM_WORLD);
  StagedMpiCommunicator staged(world, compute.s, 1 << 20, std::vector<size_t>(4, 1 << 20));
  comm_checks::check_all(staged, reference, compute.s);
  EXPECT_GT(world.calls().snapshot().collectives, 0u);  // the watchdog sees the staged calls
}

TEST(StagedComm, LimitsThrowWithWhatToRaise) {
  Stream compute;
  MpiCommunicator world(MPI_COMM_WORLD);
  StagedMpiCommunicator staged(world, compute.s, 4096, {4096});
  DeviceVec<float> big(std::vector<float>(2048, 1.0f), compute.s);
  try {
    staged.all_reduce(big.get(), 2048, ReduceOp::Sum);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("larger max_bytes"), std::string::npos) << e.what();
  }
  const CommHandle h = staged.all_reduce_start(big.get(), 16, ReduceOp::Sum);
  try {
    staged.all_reduce_start(big.get() + 16, 16, ReduceOp::Sum);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("1 of them are in flight"), std::string::npos)
        << e.what();
  }
  staged.wait(h);
  EXPECT_EQ(big.host(compute.s)[0], static_cast<float>(staged.size()));
}

// Buffers of 64 and 4096 bytes: a 64-byte call takes the small one, so a 4000-byte call still
// finds the large one; a third call finds none free and throws, before any MPI call.
TEST(StagedComm, StartedCallsTakeTheSmallestFreeBuffer) {
  Stream compute;
  MpiCommunicator world(MPI_COMM_WORLD);
  StagedMpiCommunicator staged(world, compute.s, 4096, {4096, 64});
  EXPECT_EQ(staged.pinned_bytes(), 4096u + 4096u + 64u);
  DeviceVec<float> data(std::vector<float>(1024, 1.0f), compute.s);
  const CommHandle small = staged.all_reduce_start(data.get(), 16, ReduceOp::Sum);
  const CommHandle large = staged.all_reduce_start(data.get() + 16, 1000, ReduceOp::Sum);
  try {
    staged.all_reduce_start(data.get() + 1016, 8, ReduceOp::Sum);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 of them are in flight"), std::string::npos)
        << e.what();
  }
  staged.wait(small);
  staged.wait(large);
  const std::vector<float> back = data.host(compute.s);
  const float ranks = static_cast<float>(staged.size());
  EXPECT_EQ(back[0], ranks);
  EXPECT_EQ(back[1015], ranks);
  EXPECT_EQ(back[1016], 1.0f);  // the refused call's
}

int main(int argc, char** argv) { return comm_checks::run_tests(argc, argv, false); }
