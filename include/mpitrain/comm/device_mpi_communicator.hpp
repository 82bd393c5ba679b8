// What the two ways of running MPI on device buffers share (CUDA builds): the MpiCommunicator
// they wrap — its rank, size, call log (the watchdog watches it), bytes and progress — the
// compute stream whose kernels produce and consume the buffers, and the host's waits for that
// stream, counted as blocked time. StagedMpiCommunicator copies through pinned host buffers;
// CudaAwareMpiCommunicator hands a CUDA-aware MPI the device pointers.
#pragma once

#include <cuda_runtime_api.h>

#include "mpitrain/comm/communicator.hpp"

namespace mpitrain {

class DeviceMpiCommunicator : public Communicator {
 public:
  DeviceMpiCommunicator(const DeviceMpiCommunicator&) = delete;
  DeviceMpiCommunicator& operator=(const DeviceMpiCommunicator&) = delete;

  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  const CallLog& calls() const { return mpi_.calls(); }
  void barrier() override { mpi_.barrier(); }
  void progress() override { mpi_.progress(); }

  double blocked_seconds() const override { return mpi_.blocked_seconds() + sync_seconds_; }
  void reset_blocked_seconds() override {
    mpi_.reset_blocked_seconds();
    sync_seconds_ = 0;
  }
  uint64_t bytes_sent() const override { return mpi_.bytes_sent(); }
  void reset_bytes_sent() override { mpi_.reset_bytes_sent(); }

 protected:
  // mpi: not owned, must outlive this.
  DeviceMpiCommunicator(MpiCommunicator& mpi, cudaStream_t compute)
      : mpi_(mpi), compute_(compute) {}
  void sync_compute();  // the host waits for the compute stream (counted as blocked)

  MpiCommunicator& mpi_;
  cudaStream_t compute_;

 private:
  double sync_seconds_ = 0;
};

}  // namespace mpitrain
