// MPI on device buffers for an MPI that moves them itself (CUDA-aware: Open MPI built with CUDA,
// runtime/mpi.hpp's mpi_cuda_aware()): the Communicator over an MpiCommunicator, device pointers
// handed to MPI as they are for its blocking calls and point-to-point (CUDA builds only).
// Started collectives go through a StagedMpiCommunicator over the same MPI communicator: Open MPI
// 4 takes device buffers in point-to-point and blocking collectives only, not in MPI_Iallreduce,
// MPI_Iallgather(v), MPI_Ireduce(_scatter) or MPI_Ialltoall, so those are staged through pinned
// host buffers (staged_communicator.hpp: its pool, its limits and its errors).
//
// MPI knows nothing of CUDA streams: before every call, and before a started call is started,
// the host waits for the compute stream (the kernels that wrote the buffers have finished; this
// wait counts as blocked time). A blocking call has completed on return; a started one when its
// wait() returns (the host blocks in it, as with host memory; a staged one's copy back is queued
// on the compute stream); kernels queued after either see the result. 2-byte tensors (bf16 /
// fp16 bits) go to MpiCommunicator's 2-byte calls alike.
#pragma once

#include "mpitrain/comm/device_mpi_communicator.hpp"
#include "mpitrain/comm/staged_communicator.hpp"

namespace mpitrain {

class CudaAwareMpiCommunicator final : public DeviceMpiCommunicator {
 public:
  // mpi: not owned, must outlive this; compute: the stream whose kernels produce and consume the
  // buffers; max_bytes, started: the staging pool of the started collectives (as
  // StagedMpiCommunicator's; started empty: none may be started).
  CudaAwareMpiCommunicator(MpiCommunicator& mpi, cudaStream_t compute, size_t max_bytes,
                           const std::vector<size_t>& started)
      : DeviceMpiCommunicator(mpi, compute), staged_(mpi, compute, max_bytes, started) {}

  // The MPI calls' blocked time once, and both communicators' waits for the compute stream.
  double blocked_seconds() const override {
    return DeviceMpiCommunicator::blocked_seconds() + staged_.blocked_seconds() -
           mpi_.blocked_seconds();
  }
  void reset_blocked_seconds() override {
    DeviceMpiCommunicator::reset_blocked_seconds();
    staged_.reset_blocked_seconds();
  }

  void all_reduce(float* data, size_t n, ReduceOp op) override;
  void all_reduce(double* data, size_t n, ReduceOp op) override;
  void all_reduce(int64_t* data, size_t n, ReduceOp op) override;
  void all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void all_gather(const float* in, float* out, size_t n) override;
  void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) override;
  void all_gather(const uint16_t* in, uint16_t* out, size_t n) override;
  void reduce_scatter(const uint16_t* in, uint16_t* out, size_t n, Precision dtype,
                      ReduceOp op) override;

  CommHandle all_reduce_start(float* data, size_t n, ReduceOp op) override;
  CommHandle send_start(const float* data, size_t n, int peer, int tag) override;
  CommHandle recv_start(float* data, size_t n, int peer, int tag) override;
  CommHandle send_start(const uint16_t* data, size_t n, int peer, int tag) override;
  CommHandle recv_start(uint16_t* data, size_t n, int peer, int tag) override;
  CommHandle all_to_all_start(const void* in, void* out, size_t bytes) override;
  CommHandle all_gather_start(const void* in, void* out, size_t bytes) override;
  CommHandle all_to_allv_start(const void* in, std::span<const size_t> send, void* out,
                               std::span<const size_t> recv) override;
  CommHandle reduce_scatter_start(float* data, std::span<const size_t> counts,
                                  ReduceOp op) override;
  CommHandle all_gather_start(float* data, std::span<const size_t> counts) override;
  CommHandle all_gather_start(uint16_t* data, std::span<const size_t> counts) override;
  void wait(CommHandle handle) override;

 private:
  // A staged call's handle is its staged handle + kStaged (MpiCommunicator's ids stay far below).
  static constexpr int kStaged = 1 << 30;
  static CommHandle from_staged(CommHandle h) { return {h.id + kStaged}; }

  MpiCommunicator& sync() {  // sync_compute(), then the MPI communicator
    sync_compute();
    return mpi_;
  }

  StagedMpiCommunicator staged_;  // the started collectives
};

}  // namespace mpitrain
