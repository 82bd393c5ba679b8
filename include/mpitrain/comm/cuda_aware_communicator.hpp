// MPI on device buffers for an MPI that moves them itself (CUDA-aware: Open MPI built with CUDA,
// runtime/mpi.hpp's mpi_cuda_aware()): the Communicator over an MpiCommunicator, device pointers
// handed to MPI as they are (CUDA builds only). The staged communicator's job without the copies.
//
// MPI knows nothing of CUDA streams: before every call, and before a started call is started,
// the host waits for the compute stream (the kernels that wrote the buffers have finished; this
// wait counts as blocked time). A blocking call has completed on return; a started one when its
// wait() returns (the host blocks in it, as with host memory); kernels queued after either see
// the result. calls(), bytes_sent() are the MpiCommunicator's (the watchdog watches its log).
#pragma once

#include <cuda_runtime_api.h>

#include "mpitrain/comm/communicator.hpp"

namespace mpitrain {

class CudaAwareMpiCommunicator final : public Communicator {
 public:
  // mpi: not owned, must outlive this; compute: the stream whose kernels produce and consume the
  // buffers.
  CudaAwareMpiCommunicator(MpiCommunicator& mpi, cudaStream_t compute)
      : mpi_(mpi), compute_(compute) {}

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  const CallLog& calls() const { return mpi_.calls(); }

  void all_reduce(float* data, size_t n, ReduceOp op) override;
  void all_reduce(double* data, size_t n, ReduceOp op) override;
  void all_reduce(int64_t* data, size_t n, ReduceOp op) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override { mpi_.barrier(); }
  void all_gather(const float* in, float* out, size_t n) override;
  void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) override;

  CommHandle all_reduce_start(float* data, size_t n, ReduceOp op) override;
  CommHandle send_start(const float* data, size_t n, int peer, int tag) override;
  CommHandle recv_start(float* data, size_t n, int peer, int tag) override;
  CommHandle all_to_all_start(const void* in, void* out, size_t bytes) override;
  CommHandle all_gather_start(const void* in, void* out, size_t bytes) override;
  CommHandle reduce_scatter_start(float* data, std::span<const size_t> counts,
                                  ReduceOp op) override;
  CommHandle all_gather_start(float* data, std::span<const size_t> counts) override;
  void wait(CommHandle handle) override { mpi_.wait(handle); }
  void progress() override { mpi_.progress(); }

  double blocked_seconds() const override { return mpi_.blocked_seconds() + sync_seconds_; }
  void reset_blocked_seconds() override { mpi_.reset_blocked_seconds(); sync_seconds_ = 0; }
  uint64_t bytes_sent() const override { return mpi_.bytes_sent(); }
  void reset_bytes_sent() override { mpi_.reset_bytes_sent(); }

 private:
  MpiCommunicator& sync();  // the host waits for the compute stream; then the MPI communicator

  MpiCommunicator& mpi_;
  cudaStream_t compute_;
  double sync_seconds_ = 0;
};

}  // namespace mpitrain
