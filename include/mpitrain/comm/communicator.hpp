// Collectives over a group of ranks, whatever carries them.
//
// The trainer talks to its process groups only through this interface: MpiCommunicator (host
// memory, any backend) now; an NCCL one for device memory later. Counts are element counts and
// may exceed INT_MAX (implementations split large calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

enum class ReduceOp { Sum, Max, Min };

// A started non-blocking operation, completed by wait() on the communicator that started it.
// Handles are small values; the communicator keeps the requests in a reusable pool so that
// starting operations inside a step does not allocate once the pool has grown.
struct CommHandle {
  int id = -1;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the reduction of all ranks' data.
  virtual void all_reduce(float* data, size_t n, ReduceOp op) = 0;
  virtual void all_reduce(double* data, size_t n, ReduceOp op) = 0;
  virtual void all_reduce(int64_t* data, size_t n, ReduceOp op) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // out(size * n) = every rank's in(n), in rank order.
  virtual void all_gather(const float* in, float* out, size_t n) = 0;
  // out(n) = reduction over ranks of in[rank * n .. rank * n + n).
  virtual void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) = 0;

  // Non-blocking: start, then wait(). data must stay untouched until wait() returns.
  virtual CommHandle all_reduce_start(float* data, size_t n, ReduceOp op) = 0;
  virtual CommHandle send_start(const float* data, size_t n, int peer, int tag) = 0;
  virtual CommHandle recv_start(float* data, size_t n, int peer, int tag) = 0;
  virtual void wait(CommHandle handle) = 0;
  // Lets started operations advance without waiting: MPI moves non-blocking collectives forward
  // only inside MPI calls, so code that computes between start and wait calls this now and then.
  virtual void progress() = 0;

  // Seconds this rank spent blocked in this communicator's calls and waits since the last
  // reset: the communication a step could not hide behind computation.
  virtual double blocked_seconds() const = 0;
  virtual void reset_blocked_seconds() = 0;
};

// Over an MPI communicator it does not own (MPI_COMM_WORLD, or one of the Grid's groups, which
// must outlive it). Host memory. Counts above max_count go in several MPI calls (one handle may
// then stand for several requests); max_count is INT_MAX except in tests of the splitting.
// In place: all_gather with in == out + rank * n; reduce_scatter with out == in + rank * n, which
// leaves the other ranks' blocks of in undefined. Handles must be waited before destruction.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, size_t max_count = kMaxMpiCount);
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  static constexpr size_t kMaxMpiCount = 2147483647;  // INT_MAX: MPI counts are int

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm mpi() const { return comm_; }

  void all_reduce(float* data, size_t n, ReduceOp op) override;
  void all_reduce(double* data, size_t n, ReduceOp op) override;
  void all_reduce(int64_t* data, size_t n, ReduceOp op) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  void all_gather(const float* in, float* out, size_t n) override;
  void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) override;

  CommHandle all_reduce_start(float* data, size_t n, ReduceOp op) override;
  CommHandle send_start(const float* data, size_t n, int peer, int tag) override;
  CommHandle recv_start(float* data, size_t n, int peer, int tag) override;
  void wait(CommHandle handle) override;
  void progress() override;

  double blocked_seconds() const override { return blocked_seconds_; }
  void reset_blocked_seconds() override { blocked_seconds_ = 0; }

 private:
  // The requests of one started operation; slots are reused, so their vectors stop growing.
  struct Slot {
    std::vector<MPI_Request> requests;
    bool busy = false;
  };
  int acquire_slot();  // index of a free slot, marked busy

  MPI_Comm comm_;
  size_t max_count_;
  int rank_ = 0, size_ = 1;
  double blocked_seconds_ = 0;
  std::vector<Slot> slots_;
  std::vector<int> free_slots_;
};

}  // namespace mpitrain
