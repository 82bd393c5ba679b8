// ranks: 1 2
// NcclCommunicator against MpiCommunicator, every operation, on one GPU per rank (np 2 is
// skipped, with the reason, on a machine with fewer GPUs than ranks). Also: started calls are
// stream-ordered (the host does not block in wait()), and the error poll for the watchdog.
#include <cuda_runtime_api.h>

#include "comm_checks.hpp"
#include "mpitrain/comm/nccl_communicator.hpp"

using namespace mpitrain;
using comm_checks::DeviceVec;
using comm_checks::Stream;

TEST(NcclComm, EveryOperationAsMpi) {
  Stream compute;
  MpiCommunicator mpi(MPI_COMM_WORLD, "world");
  NcclCommunicator nccl(MPI_COMM_WORLD, "world", compute.s);
  comm_checks::check_all(nccl, mpi, compute.s);
  EXPECT_EQ(nccl.calls().snapshot().collectives, mpi.calls().snapshot().collectives);
  std::string what;
  EXPECT_FALSE(nccl.poll_error(&what)) << what;
  EXPECT_EQ(nccl.async_error(), ncclSuccess);
}

// A kernel-free check that wait() orders the compute stream after the operation: the result is
// copied on the compute stream right after wait(), with no host synchronisation in between.
TEST(NcclComm, WaitOrdersTheComputeStream) {
  Stream compute;
  NcclCommunicator nccl(MPI_COMM_WORLD, "world", compute.s);
  const size_t n = 1 << 22;
  std::vector<float> ones(n, 1.0f);
  DeviceVec<float> data(ones, compute.s), copy(std::vector<float>(n, 0.0f), compute.s);
  nccl.reset_blocked_seconds();
  const CommHandle h = nccl.all_reduce_start(data.get(), n, ReduceOp::Sum);
  nccl.wait(h);
  CUDA_CHECK(cudaMemcpyAsync(copy.get(), data.get(), n * sizeof(float), cudaMemcpyDeviceToDevice,
                             compute.s));
  const std::vector<float> got = copy.host(compute.s);
  EXPECT_EQ(got.front(), static_cast<float>(nccl.size()));
  EXPECT_EQ(got.back(), static_cast<float>(nccl.size()));
  EXPECT_EQ(nccl.blocked_seconds(), 0.0);  // wait() never blocks the host
}

TEST(NcclComm, AbortedCommunicatorRefusesCalls) {
  if (MpiComm::world().size() > 1) GTEST_SKIP() << "aborting one rank's communicator";
  Stream compute;
  NcclCommunicator nccl(MPI_COMM_WORLD, "world", compute.s);
  nccl.abort();
  std::string what;
  EXPECT_TRUE(nccl.poll_error(&what));
  EXPECT_NE(what.find("aborted"), std::string::npos) << what;
  float x = 0;
  EXPECT_THROW(nccl.all_reduce_start(&x, 1, ReduceOp::Sum), Error);
}

int main(int argc, char** argv) { return comm_checks::run_tests(argc, argv, true); }
