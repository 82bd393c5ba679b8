// MPI on device buffers for an MPI that moves them itself (CUDA-aware: Open MPI built with CUDA,
// runtime/mpi.hpp's mpi_cuda_aware()): the Communicator over an MpiCommunicator, device pointers
// handed to MPI as they are (CUDA builds only). The staged communicator's job without the copies.
//
// MPI knows nothing of CUDA streams: before every call, and before a started call is started,
// the host waits for the compute stream (the kernels that wrote the buffers have finished; this
// wait counts as blocked time). A blocking call has completed on return; a started one when its
// wait() returns (the host blocks in it, as with host memory); kernels queued after either see
// the result. 2-byte tensors (bf16 / fp16 bits) go to MpiCommunicator's 2-byte calls alike.
#pragma once

#include "mpitrain/comm/device_mpi_communicator.hpp"

namespace mpitrain {

class CudaAwareMpiCommunicator final : public DeviceMpiCommunicator {
 public:
  CudaAwareMpiCommunicator(MpiCommunicator& mpi, cudaStream_t compute)
      : DeviceMpiCommunicator(mpi, compute) {}

  void all_reduce(float* data, size_t n, ReduceOp op) override;
  void all_reduce(double* data, size_t n, ReduceOp op) override;
  void all_reduce(int64_t* data, size_t n, ReduceOp op) override;
  void all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void all_gather(const float* in, float* out, size_t n) override;
  void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) override;

  CommHandle all_reduce_start(float* data, size_t n, ReduceOp op) override;
  CommHandle send_start(const float* data, size_t n, int peer, int tag) override;
  CommHandle recv_start(float* data, size_t n, int peer, int tag) override;
  CommHandle send_start(const uint16_t* data, size_t n, int peer, int tag) override;
  CommHandle recv_start(uint16_t* data, size_t n, int peer, int tag) override;
  CommHandle all_to_all_start(const void* in, void* out, size_t bytes) override;
  CommHandle all_gather_start(const void* in, void* out, size_t bytes) override;
  CommHandle reduce_scatter_start(float* data, std::span<const size_t> counts,
                                  ReduceOp op) override;
  CommHandle all_gather_start(float* data, std::span<const size_t> counts) override;
  CommHandle all_gather_start(uint16_t* data, std::span<const size_t> counts) override;
  void wait(CommHandle handle) override { mpi_.wait(handle); }

 private:
  MpiCommunicator& sync() {  // sync_compute(), then the MPI communicator
    sync_compute();
    return mpi_;
  }
};

}  // namespace mpitrain
