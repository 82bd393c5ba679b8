// MPI on device buffers: the Communicator over an MpiCommunicator through pinned host staging
// buffers (CUDA builds only). For runs where NCCL cannot serve: several ranks sharing one GPU
// (NCCL refuses two ranks of one communicator on one device), or --comm mpi to compare.
//
// Every call copies its device data to a pinned buffer (cudaMemcpyAsync on the compute stream,
// then the host waits for that stream, so the copy sees the compute before it), runs the MPI
// call on the buffer, and copies the result back on the compute stream. Blocking calls do all of
// it before returning; started calls copy device->host before starting (the host waits for the
// compute stream then) and host->device in wait(), queued on the compute stream: kernels queued
// after wait() see the result, the host after synchronising that stream. Pointers may also be
// host memory (cudaMemcpyDefault; host scalars just take the detour).
//
// Buffers: the pool is allocated at construction and never grows — one buffer for blocking calls,
// max_bytes (what the largest call stages: an all-reduce's buffer, an all-gather's whole output
// plus its block, an all-to-all's input plus output, an uneven call's sum of counts), and one per
// started call the caller can have in flight at once, each of the bytes given for it
// (train/comm_groups.hpp sizes them by the calls that are in flight together). A started call
// takes the smallest free buffer it fits in; a larger blocking call, or a started call no free
// buffer holds, throws Error naming the figures (never a wait for another call). A buffer becomes
// free when its host->device copy has completed (an event).
//
// 2-byte tensors (bf16 / fp16 bits) go the same way, to MpiCommunicator's 2-byte calls.
// calls(), bytes_sent() are the MpiCommunicator's (the watchdog watches its CallLog); blocked
// seconds are the MPI calls' plus the host's waits for the staging copies.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <type_traits>
#include <vector>

#include "mpitrain/comm/device_mpi_communicator.hpp"

namespace mpitrain {

class StagedMpiCommunicator final : public DeviceMpiCommunicator {
 public:
  // mpi: not owned, must outlive this; compute: the stream whose kernels produce and consume the
  // buffers; max_bytes: the largest blocking call's staging (see above); started: the bytes of
  // each started call's buffer (empty: blocking calls only).
  StagedMpiCommunicator(MpiCommunicator& mpi, cudaStream_t compute, size_t max_bytes,
                        const std::vector<size_t>& started);

  size_t pinned_bytes() const;  // the pool's pinned host memory

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
  void wait(CommHandle handle) override;  // MPI wait (host), then host->device on compute

 private:
  struct HostDeleter { void operator()(void* p) const; };
  struct EventDeleter { void operator()(cudaEvent_t e) const; };
  using Pinned = std::unique_ptr<void, HostDeleter>;
  using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;

  // A staging buffer of `size` bytes; for a started call also its MPI handle and what wait()
  // copies back: bytes from host + offset to dst (nothing when bytes is 0).
  struct Stage {
    Pinned host;
    size_t size = 0;
    Event copied;  // after its last host->device copy
    bool busy = false;
    CommHandle mpi;
    void* dst = nullptr;
    size_t offset = 0, bytes = 0;
  };

  char* host(Stage& s) { return static_cast<char*>(s.host.get()); }
  void need(size_t bytes, const char* op) const;  // throws above max_bytes
  int acquire(size_t bytes, const char* op);      // the smallest free started-call stage
  void to_host(void* dst, const void* src, size_t bytes);    // queued on compute
  void to_device(void* dst, const void* src, size_t bytes);  // queued on compute
  CommHandle started(int stage, CommHandle mpi, void* dst, size_t offset, size_t bytes);
  static Stage make_stage(size_t bytes);
  // The MPI all-reduce of E on a staged copy of data; how: its trailing arguments (op, or
  // dtype and op for 2-byte elements).
  template <typename E, typename... How>
  void all_reduce_typed(E* data, size_t n, How... how);
  template <typename E>
  void all_gather_typed(const E* in, E* out, size_t n);
  template <typename E, typename... How>
  void reduce_scatter_typed(const E* in, E* out, size_t n, How... how);
  template <typename E>
  CommHandle send_typed(const E* data, size_t n, int peer, int tag);
  template <typename E>
  CommHandle recv_typed(E* data, size_t n, int peer, int tag);
  template <typename E>
  CommHandle all_gather_typed(E* data, std::span<const size_t> counts);

  size_t max_bytes_;
  Stage blocking_;
  std::vector<Stage> stages_;  // for started calls; a handle's id is its stage's index
};

}  // namespace mpitrain
