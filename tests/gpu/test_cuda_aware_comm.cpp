// ranks: 2
// CudaAwareMpiCommunicator (device pointers handed to a CUDA-aware MPI) against
// MpiCommunicator, every operation, with the ranks sharing one GPU (or each on its own). Skipped,
// with the reason, where the MPI is not CUDA-aware (Debian's Open MPI is built without CUDA): every
// rank then exits 77, which mpirun passes on and ctest reports as skipped (SKIP_RETURN_CODE).
#include <cuda_runtime_api.h>

#include <cstdio>

#include "comm_checks.hpp"
#include "mpitrain/comm/cuda_aware_communicator.hpp"

using namespace mpitrain;

namespace {
// Set (on every rank alike) when the test was skipped for want of a CUDA-aware MPI; main then
// returns 77 instead of RUN_ALL_TESTS()'s 0.
bool not_cuda_aware = false;
}  // namespace

TEST(CudaAwareComm, EveryOperationAsMpi) {
  int unaware = mpi_cuda_aware() ? 0 : 1;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &unaware, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (unaware) {
    not_cuda_aware = true;
    if (MpiComm::world().rank() == 0)
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

int main(int argc, char** argv) {
  const int rc = comm_checks::run_tests(argc, argv, false);
  return rc == 0 && not_cuda_aware ? 77 : rc;
}
