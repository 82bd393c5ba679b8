// ranks: 2
// StagedMpiCommunicator (MPI through pinned host buffers) against MpiCommunicator, every
// operation, with the ranks sharing one GPU (or each on its own, where there are enough); the
// staging limits throw with what to raise.
#include <cuda_runtime_api.h>

#include "comm_checks.hpp"
#include "mpitrain/comm/staged_communicator.hpp"

using namespace mpitrain;
using comm_checks::DeviceVec;
using comm_checks::Stream;

TEST(StagedComm, EveryOperationAsMpi) {
  Stream compute;
  MpiCommunicator world(MPI_COMM_WORLD, "world"), reference(MPI_COMM_WORLD);
  StagedMpiCommunicator staged(world, compute.s, 1 << 20, 4);
  comm_checks::check_all(staged, reference, compute.s);
  EXPECT_GT(world.calls().snapshot().collectives, 0u);  // the watchdog sees the staged calls
}

TEST(StagedComm, LimitsThrowWithWhatToRaise) {
  Stream compute;
  MpiCommunicator world(MPI_COMM_WORLD);
  StagedMpiCommunicator staged(world, compute.s, 4096, 1);
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
    EXPECT_NE(std::string(e.what()).find("larger in_flight"), std::string::npos) << e.what();
  }
  staged.wait(h);
  EXPECT_EQ(big.host(compute.s)[0], static_cast<float>(staged.size()));
}

int main(int argc, char** argv) { return comm_checks::run_tests(argc, argv, false); }
