// Collectives over a group of ranks, whatever carries them.
//
// The trainer talks to its process groups only through this interface: MpiCommunicator (host
// memory, any backend) now; an NCCL one for device memory later. Counts are element counts and
// may exceed INT_MAX (implementations split large calls, or reject them where they say so).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "mpitrain/backend/precision.hpp"
#include "mpitrain/comm/call_tracking.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/watchdog.hpp"

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
  // 2-byte tensors (bf16 / fp16 bits, dtype says which): a Sum whose every partial sum is
  // rounded to dtype, as a GPU library's bf16 all-reduce is; with 2 ranks the result is
  // round(a + b), the fp32 sum rounded once. Other operations throw Error.
  virtual void all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) = 0;
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // out(size * n) = every rank's in(n), in rank order.
  virtual void all_gather(const float* in, float* out, size_t n) = 0;
  // out(n) = reduction over ranks of in[rank * n .. rank * n + n).
  virtual void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) = 0;
  // The same for 2-byte tensors (bf16 / fp16 bits): the gather moves bits; the reduce-scatter is
  // a Sum of dtype whose every partial sum is rounded, as the 2-byte all_reduce's.
  virtual void all_gather(const uint16_t* in, uint16_t* out, size_t n) = 0;
  virtual void reduce_scatter(const uint16_t* in, uint16_t* out, size_t n, Precision dtype,
                              ReduceOp op) = 0;

  // Non-blocking: start, then wait(). data must stay untouched until wait() returns.
  virtual CommHandle all_reduce_start(float* data, size_t n, ReduceOp op) = 0;
  virtual CommHandle send_start(const float* data, size_t n, int peer, int tag) = 0;
  virtual CommHandle recv_start(float* data, size_t n, int peer, int tag) = 0;
  // The same for 2-byte elements (a bf16 / fp16 tensor's bits): n elements of 2 bytes.
  virtual CommHandle send_start(const uint16_t* data, size_t n, int peer, int tag) = 0;
  virtual CommHandle recv_start(uint16_t* data, size_t n, int peer, int tag) = 0;
  // Raw bytes (compressed data), out(size * bytes) in rank order. all_to_all: block r of
  // in(size * bytes) goes to rank r; all_gather: in(bytes) goes to every rank.
  virtual CommHandle all_to_all_start(const void* in, void* out, size_t bytes) = 0;
  virtual CommHandle all_gather_start(const void* in, void* out, size_t bytes) = 0;
  // Uneven all-to-all of raw bytes (expert parallelism's token exchange): in holds one block per
  // rank in rank order, block r (send[r] bytes, may be 0) goes to rank r; out receives rank r's
  // block (recv[r] bytes) after those of ranks < r. recv[r] must equal what rank r sends here:
  // the caller exchanges the counts first (an all_to_all_start of them).
  virtual CommHandle all_to_allv_start(const void* in, std::span<const size_t> send, void* out,
                                       std::span<const size_t> recv) = 0;
  // Uneven blocks, in place over data(sum of counts): rank r's block follows those of ranks < r,
  // counts may be 0; each rank's block stays at its own offset. reduce_scatter: after wait(),
  // this rank's block of data holds the reduction of every rank's block there, the rest of data
  // is undefined. all_gather: this rank's block is in place at the start; after wait(), every
  // rank's is.
  virtual CommHandle reduce_scatter_start(float* data, std::span<const size_t> counts,
                                          ReduceOp op) = 0;
  virtual CommHandle all_gather_start(float* data, std::span<const size_t> counts) = 0;
  virtual CommHandle all_gather_start(uint16_t* data, std::span<const size_t> counts) = 0;  // 2-byte
  virtual void wait(CommHandle handle) = 0;
  // Lets started operations advance without waiting: MPI moves non-blocking collectives forward
  // only inside MPI calls, so code that computes between start and wait calls this now and then.
  virtual void progress() = 0;

  // Seconds this rank spent blocked in this communicator's calls and waits since the last
  // reset: the communication a step could not hide behind computation.
  virtual double blocked_seconds() const = 0;
  virtual void reset_blocked_seconds() = 0;

  // Bytes this rank put on the wire since the last reset, counted alike for every operation and
  // implementation (comm/bus_bytes.hpp: what a ring algorithm sends, e.g. 2(P-1)/P of an
  // all-reduce's buffer): what the data format and the group size cost, independent of the
  // algorithm the library picks. Nothing on one rank.
  virtual uint64_t bytes_sent() const = 0;
  virtual void reset_bytes_sent() = 0;
};

// Over an MPI communicator it does not own (MPI_COMM_WORLD, or one of the Grid's groups, which
// must outlive it). Host memory. Counts above max_count go in several MPI calls (one handle may
// then stand for several requests); max_count is INT_MAX except in tests of the splitting.
// In place: all_gather with in == out + rank * n; reduce_scatter with out == in + rank * n, which
// leaves the other ranks' blocks of in undefined. Handles must be waited before destruction.
// Every call is recorded in calls() (op, bytes, sequence number, whether this rank is blocked in
// it) for the watchdog: a blocking call while it runs, a started one until its wait() returns.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, size_t max_count = kMaxMpiCount)
      : MpiCommunicator(comm, "", max_count) {}
  // name: how the watchdog calls this group ("world", "tp", "dp", "pp", "mp", "embedding").
  MpiCommunicator(MPI_Comm comm, std::string name, size_t max_count = kMaxMpiCount);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  static constexpr size_t kMaxMpiCount = 2147483647;  // INT_MAX: MPI counts are int

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  MPI_Comm mpi() const { return comm_; }
  const CallLog& calls() const { return calls_; }

  void all_reduce(float* data, size_t n, ReduceOp op) override;
  void all_reduce(double* data, size_t n, ReduceOp op) override;
  void all_reduce(int64_t* data, size_t n, ReduceOp op) override;
  void all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) override;
  // In place, each value with its own operation (ops[i] for data[i], n <= kMaxEach): several
  // host figures of different kinds in one call, e.g. a peak (max) and an energy (sum).
  static constexpr size_t kMaxEach = 16;
  void all_reduce_each(double* data, const ReduceOp* ops, size_t n);
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
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
  // These six are not split: a count, block or offset above max_count throws.
  CommHandle all_to_all_start(const void* in, void* out, size_t bytes) override;
  CommHandle all_gather_start(const void* in, void* out, size_t bytes) override;
  CommHandle all_to_allv_start(const void* in, std::span<const size_t> send, void* out,
                               std::span<const size_t> recv) override;
  CommHandle reduce_scatter_start(float* data, std::span<const size_t> counts,
                                  ReduceOp op) override;
  CommHandle all_gather_start(float* data, std::span<const size_t> counts) override;
  CommHandle all_gather_start(uint16_t* data, std::span<const size_t> counts) override;
  void wait(CommHandle handle) override;
  void progress() override;

  double blocked_seconds() const override { return blocked_seconds_; }
  void reset_blocked_seconds() override { blocked_seconds_ = 0; }
  uint64_t bytes_sent() const override { return bytes_sent_; }
  void reset_bytes_sent() override { bytes_sent_ = 0; }

 private:
  // The requests of one started operation; slots are reused, so their vectors stop growing.
  // counts / displs: the int arrays of a started MPI_I*v call, which MPI reads until it completes
  // (recv_counts / recv_displs: the receiving side of MPI_Ialltoallv).
  struct Slot {
    std::vector<MPI_Request> requests;
    std::vector<int> counts, displs, recv_counts, recv_displs;
    bool busy = false;
    CallInfo call;  // as recorded in calls_ when it started
  };
  // Index of a free slot, marked busy; records the call starting in it (peer: a send's or
  // receive's partner, -1 for a collective).
  int acquire_slot(const char* op, uint64_t bytes, int peer = -1);
  // The sum of counts (one per rank); throws where a count, offset or the sum exceeds max_count.
  size_t checked_blocks(std::span<const size_t> counts, const char* op) const;
  // counts, displs as MPI ints (into the given vectors: slot.counts, slot.displs by default)
  void set_blocks(Slot& slot, std::span<const size_t> counts);
  void set_blocks(std::vector<int>& ints, std::vector<int>& displs, std::span<const size_t> counts);
  int checked_count(size_t count, const char* op) const;        // throws above max_count
  void count_sent(uint64_t bytes) { bytes_sent_ += bytes; }  // bus bytes: 0 on one rank
  // The float and 2-byte forms of the blocking all_gather / reduce_scatter, of send/recv and of
  // the uneven all_gather.
  template <typename E>
  void all_gather_typed(const E* in, E* out, size_t n, MPI_Datatype type);
  template <typename E>
  void reduce_scatter_typed(const E* in, E* out, size_t n, MPI_Datatype type, MPI_Op op);
  template <typename E>
  CommHandle point_start(bool send, E* data, size_t n, MPI_Datatype type, int peer, int tag);
  template <typename E>
  CommHandle gather_blocks_start(E* data, std::span<const size_t> counts, MPI_Datatype type);

  MPI_Comm comm_;
  size_t max_count_;
  int rank_ = 0, size_ = 1;
  double blocked_seconds_ = 0;
  uint64_t bytes_sent_ = 0;
  SlotPool<Slot> slots_;
  CallLog calls_;
  class PairReduction;
  std::unique_ptr<PairReduction> pairs_;  // all_reduce_each's MPI datatype and operation
  class HalfSums;
  std::unique_ptr<HalfSums> half_sums_;  // the 2-byte all_reduce's MPI operations
};

}  // namespace mpitrain
