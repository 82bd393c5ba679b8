// ranks: 2
// CudaAwareMpiCommunicator (device pointers handed to a CUDA-aware MPI) against
// MpiCommunicator, every operation, with the ranks sharing one GPU (or each on its own). Skipped,
// with the reason, where the MPI is not CUDA-aware (Debian's Open MPI is built without CUDA).
#include <cuda_runtime_api.h>

#include <cstdio>

#include "comm_checks.hpp"
#include "mpitrain/comm/cuda_aware_communicator.hpp"

using namespace mpitrain;

TEST(CudaAwareComm, EveryOperationAsMpi) {
  if (!mpi_cuda_aware()) {
    std::printf("SKIP: this MPI is not CUDA-aware (MPIX_Query_cuda_support)\n");
    GTEST_SKIP();
  }
  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  {
    MpiCommunicator world(MPI_COMM_WORLD, "world"), reference(MPI_COMM_WORLD);
    CudaAwareMpiCommunicator direct(world, compute);
    comm_checks::check_all(direct, reference, compute);
    EXPECT_GT(world.calls().snapshot().collectives, 0u);  // the watchdog sees its calls
  }
  cudaStreamDestroy(compute);
}

int main(int argc, char** argv) { return comm_checks::run_tests(argc, argv, false); }
