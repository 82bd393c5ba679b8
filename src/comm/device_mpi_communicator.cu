#include "mpitrain/comm/device_mpi_communicator.hpp"

#include "mpitrain/backend/cuda/check.hpp"

namespace mpitrain {

void DeviceMpiCommunicator::sync_compute() {
  const int64_t start = CallLog::now_ns();
  CUDA_CHECK(cudaStreamSynchronize(compute_));
  sync_seconds_ += 1e-9 * static_cast<double>(CallLog::now_ns() - start);
}

}  // namespace mpitrain
