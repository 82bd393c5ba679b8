// The Communicator over NCCL, for device memory (CUDA builds only).
//
// Set-up (collective over the MPI group): rank 0 of the group creates the NCCL unique id and
// broadcasts it over MPI; every rank then calls ncclCommInitRankConfig in NCCL's non-blocking
// mode (config.blocking = 0) on its current CUDA device, and polls ncclCommGetAsyncError until
// the communicator is ready, an error, or the deadline (timeout_s: then it aborts and throws).
// The same polling follows every NCCL call that answers ncclInProgress.
//
// Streams. Operations run on a communication stream of their own. Each one first waits (an
// event) for the work queued so far on the compute stream given at construction, so it reads
// what the compute before it wrote. Then:
//   blocking calls (all_reduce, broadcast, barrier, all_gather, reduce_scatter) block the host
//     until the operation has completed on the device — the result is final, as with MPI — by
//     polling its event and the communicator's error state (with the deadline);
//   started calls (*_start) return at once; wait() does NOT block the host: it makes the compute
//     stream wait for the operation's completion event, so kernels queued after wait() see the
//     result. The host sees it only after synchronising the compute stream. A send or receive is
//     queued until the next call that is not one (or wait, or progress): sends and receives
//     started back to back go to NCCL as one group (ncclGroupStart/End), so exchanges in both
//     directions cannot deadlock on the one stream.
// blocked_seconds counts host time only: the blocking calls, never wait().
//
// Buffers are device memory (NCCL reads no host pointers); host scalars (loss sums, counters) go
// over an MpiCommunicator of the same group. Counts are size_t all the way (NCCL takes them).
// bytes_sent and calls() (the watchdog's CallLog) count and record as MpiCommunicator does; a
// started call stays "entered" and is never "blocked" in the log (the host does not block in it).
// Uneven reduce-scatter: one in-place ncclReduce per block onto its owner (the sum lands at the
// block's own offset); uneven all-gather: one in-place
// ncclBroadcast per block from its owner; all-to-all: one ncclSend and ncclRecv per rank; each
// group in one ncclGroupStart/End. 2-byte tensors (bf16 / fp16 bits): the all-reduce is NCCL's
// ncclBfloat16 / ncclFloat16 ncclSum (other operations throw Error); sends, receives and the
// uneven all-gather move them as a 2-byte type; bytes and the log count 2 bytes an element.
//
// Failures: every NCCL result is checked (NCCL_CHECK-like: ncclGetErrorString and
// ncclGetLastError in the message). abort() ends the communicator (ncclCommAbort) so that
// blocked device work and host polling return.
//
// The watchdog (runtime/watchdog.hpp) watches it as DeviceWork: every started operation also
// records an event of a fixed ring (kWatched) when it is issued; the watchdog thread queries the
// oldest (cudaEventQuery, under a mutex the issuing thread takes only to push) and reports it
// when it has been incomplete longer than the timeout; async_failure() is ncclCommGetAsyncError.
// A full ring is drained by the issuing thread (it waits for the oldest event). timeout_s 0:
// no deadline of its own (the watchdog's still applies).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "mpitrain/comm/communicator.hpp"

namespace mpitrain {

class NcclCommunicator final : public Communicator, public DeviceWork {
 public:
  // comm: the MPI group (not owned; used at construction only); name: for the watchdog ("tp",
  // "dp", ...); compute: the stream the trainer computes on; timeout_s: how long set-up, one
  // blocking call or NCCL's answer to one call may take before the communicator is aborted.
  NcclCommunicator(MPI_Comm comm, std::string name, cudaStream_t compute, double timeout_s = 600);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const CallLog& calls() const override { return calls_; }
  cudaStream_t stream() const { return stream_.get(); }  // the communication stream

  void all_reduce(float* data, size_t n, ReduceOp op) override;
  void all_reduce(double* data, size_t n, ReduceOp op) override;
  void all_reduce(int64_t* data, size_t n, ReduceOp op) override;
  void all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) override;  // ncclSum
  void broadcast(void* data, size_t bytes, int root) override;
  void barrier() override;
  void all_gather(const float* in, float* out, size_t n) override;
  void reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) override;
  void all_gather(const uint16_t* in, uint16_t* out, size_t n) override;
  void reduce_scatter(const uint16_t* in, uint16_t* out, size_t n, Precision dtype,
                      ReduceOp op) override;  // ncclSum of bf16 / fp16

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
  void wait(CommHandle handle) override;      // stream ordering, see above
  void progress() override;                   // issues queued sends/receives; checks for errors

  double blocked_seconds() const override { return blocked_seconds_; }
  void reset_blocked_seconds() override { blocked_seconds_ = 0; }
  uint64_t bytes_sent() const override { return bytes_sent_; }
  void reset_bytes_sent() override { bytes_sent_ = 0; }

  // True when NCCL reports an asynchronous error (a failed peer or network; *what = the error
  // and NCCL's last message). Safe from another thread: it only reads (ncclCommGetAsyncError,
  // under the mutex abort() holds).
  bool poll_error(std::string* what) const;
  ncclResult_t async_error() const;  // ncclSuccess, ncclInProgress, or the error

  // DeviceWork, for the watchdog thread.
  std::optional<CallInfo> oldest_incomplete() override;
  std::string async_failure() override;
  // ncclCommAbort; every later call throws. From any thread: NCCL's abort is the way to end a
  // communicator whose operations hang (the watchdog's case: the issuing thread's later calls
  // then wait for the job to end instead of failing with a second message).
  void abort() override;

 private:
  // NCCL_CHECK(call) in the .cu: ncclInProgress polls until settled (deadline); an error throws
  // with ncclGetErrorString(rc) and ncclGetLastError(comm).
  void check(ncclResult_t rc, const char* call, const char* file, int line);
  struct StreamDeleter { void operator()(cudaStream_t s) const; };
  struct EventDeleter { void operator()(cudaEvent_t e) const; };
  struct DeviceDeleter { void operator()(void* p) const; };
  using Stream = std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter>;
  using Event = std::unique_ptr<std::remove_pointer_t<cudaEvent_t>, EventDeleter>;
  using DeviceBuffer = std::unique_ptr<void, DeviceDeleter>;
  static Event make_event();

  // A started operation: its completion event (recorded on stream_) and its log entry.
  struct Slot {
    Event done;
    bool busy = false, queued = false;  // queued: a send/receive not yet issued
    CallInfo call;
  };
  // A send or receive waiting for the next flush(): n elements of type.
  struct P2p {
    bool send;
    void* data;
    size_t n;
    ncclDataType_t type;
    int peer, slot;
  };

  int acquire_slot(const char* op, uint64_t bytes, int peer = -1);
  void begin();                 // flush(), then after_compute()
  void after_compute();         // stream_ waits for the work queued on the compute stream so far
  void end_started(int slot);   // records the slot's completion event on stream_, and watches it
  void watch(const CallInfo& call);  // pushes an event recorded now on stream_ to the ring
  void finish_blocking();       // host blocks until stream_'s work is done (polled, deadline)
  void flush();                 // issues the queued sends and receives as one group
  void settle(const char* call);  // polls ncclCommGetAsyncError while in progress (deadline)
  [[noreturn]] void fail(const std::string& what);  // aborts, throws
  [[noreturn]] void park() const;  // after abort() from another thread: wait for the end
  void require_usable() const;
  template <typename E>
  void all_reduce_typed(E* data, size_t n, ncclDataType_t type, ReduceOp op);
  // The blocking all_gather / reduce_scatter of n elements per rank of `type`.
  void all_gather_blocking(const void* in, void* out, size_t n, size_t element,
                           ncclDataType_t type);
  void reduce_scatter_blocking(const void* in, void* out, size_t n, size_t element,
                               ncclDataType_t type, ReduceOp op);
  template <typename E>
  CommHandle p2p_start(bool send, E* data, size_t n, ncclDataType_t type, int peer);
  template <typename E>
  CommHandle all_gather_typed(E* data, std::span<const size_t> counts, ncclDataType_t type);
  size_t blocks_total(std::span<const size_t> counts, const char* op) const;
  void count_sent(uint64_t bytes) { if (size_ > 1) bytes_sent_ += bytes; }

  int rank_ = 0, size_ = 1;
  double timeout_s_;
  cudaStream_t compute_;
  ncclComm_t comm_ = nullptr;  // destroyed (or aborted) in the destructor
  std::atomic<bool> aborted_{false};  // read by poll_error on the watchdog thread
  // Held by ncclCommAbort and every ncclCommGetAsyncError after construction: the two may come
  // from different threads (the watchdog's poll, the issuing thread's abort, or the reverse).
  mutable std::mutex abort_mutex_;
  std::atomic<bool> aborted_elsewhere_{false};  // abort() came from another thread
  std::thread::id owner_ = std::this_thread::get_id();  // the thread that makes the calls
  Stream stream_;
  Event ready_, blocking_done_;  // compute's work before an op; a blocking op's completion
  DeviceBuffer barrier_token_;   // the one float barrier() all-reduces
  double blocked_seconds_ = 0;
  uint64_t bytes_sent_ = 0;
  SlotPool<Slot> slots_;
  std::vector<P2p> queued_;
  CallLog calls_;

  // The watched ring: operations issued, oldest first, each with an event recorded after it.
  static constexpr size_t kWatched = 256;
  struct Watched {
    Event done;
    CallInfo call;
  };
  int device_ = 0;  // the CUDA device (the watchdog thread sets it before querying)
  std::mutex watched_mutex_;
  std::array<Watched, kWatched> watched_;
  size_t watched_first_ = 0, watched_count_ = 0;
};

}  // namespace mpitrain
