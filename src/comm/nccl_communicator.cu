#include "mpitrain/comm/nccl_communicator.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/comm/bus_bytes.hpp"
#include "mpitrain/runtime/error.hpp"

#define NCCL_CHECK(call) check((call), #call, __FILE__, __LINE__)

namespace mpitrain {

namespace {

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  return ncclSum;
}

// The element type of 2-byte tensors where NCCL only moves them (send, receive, broadcast):
// any 2-byte type moves the bits unchanged.
constexpr ncclDataType_t kTwoBytes = ncclFloat16;

using Clock = std::chrono::steady_clock;

// seconds <= 0: no deadline.
Clock::time_point deadline_after(double seconds) {
  if (seconds <= 0) return Clock::time_point::max();
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

}  // namespace

void NcclCommunicator::StreamDeleter::operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
void NcclCommunicator::EventDeleter::operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
void NcclCommunicator::DeviceDeleter::operator()(void* p) const { cudaFree(p); }

NcclCommunicator::Event NcclCommunicator::make_event() {
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return Event(e);
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm, std::string name, cudaStream_t compute,
                                   double timeout_s)
    : timeout_s_(timeout_s), compute_(compute), calls_(std::move(name), world_ranks_of(comm)) {
  MPI_CHECK(MPI_Comm_rank(comm, &rank_));
  MPI_CHECK(MPI_Comm_size(comm, &size_));
  CUDA_CHECK(cudaGetDevice(&device_));
  for (Watched& w : watched_) w.done = make_event();
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  stream_.reset(s);
  ready_ = make_event();
  blocking_done_ = make_event();
  void* token = nullptr;
  CUDA_CHECK(cudaMalloc(&token, sizeof(float)));
  barrier_token_.reset(token);

  ncclUniqueId id{};
  if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  try {
    NCCL_CHECK(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config));
  } catch (...) {
    abort();  // the destructor does not run for a constructor that throws
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ == nullptr || aborted_) return;
  // Finalize (completes the queued operations) in NCCL's non-blocking way; abort instead where
  // it fails or does not settle in time. Nothing may throw here.
  ncclResult_t state = ncclCommFinalize(comm_);
  const Clock::time_point deadline = deadline_after(timeout_s_);
  while (state == ncclInProgress && Clock::now() < deadline) {
    std::this_thread::yield();
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
  }
  if (state == ncclSuccess)
    ncclCommDestroy(comm_);
  else
    ncclCommAbort(comm_);
}

void NcclCommunicator::fail(const std::string& what) {
  abort();
  if (aborted_elsewhere_) park();
  throw Error(what);
}

// Aborted by another thread: the watchdog, which ends the job with its report and exit code
// right after; failing here too would race it with another message and exit code.
void NcclCommunicator::park() const {
  std::this_thread::sleep_for(std::chrono::seconds(60));
  MPITRAIN_THROW("NCCL communicator '" + calls_.name() + "' was aborted by the watchdog, "
                 "and the job did not end");
}

void NcclCommunicator::check(ncclResult_t rc, const char* call, const char* file, int line) {
  if (rc == ncclInProgress) {
    settle(call);
    return;
  }
  if (rc != ncclSuccess)
    fail(where(file, line, calls_.name() + " " + call + ": " + ncclGetErrorString(rc) + ": " +
                               ncclGetLastError(comm_)));
}

void NcclCommunicator::settle(const char* call) {
  const Clock::time_point deadline = deadline_after(timeout_s_);
  ncclResult_t state = ncclInProgress;
  while (true) {
    state = async_error();
    if (state != ncclInProgress) break;
    if (Clock::now() > deadline)
      fail(calls_.name() + " " + call + ": NCCL still in progress after " +
           std::to_string(timeout_s_) + " s; communicator aborted");
    std::this_thread::yield();
  }
  if (state != ncclSuccess)
    fail(calls_.name() + " " + call + ": " + ncclGetErrorString(state) + ": " +
         ncclGetLastError(comm_));
}

void NcclCommunicator::require_usable() const {
  if (aborted_elsewhere_) park();
  if (aborted_) MPITRAIN_THROW("NCCL communicator '" + calls_.name() + "' was aborted");
}

bool NcclCommunicator::poll_error(std::string* what) const {
  const ncclResult_t state = async_error();
  if (state == ncclSuccess || state == ncclInProgress) return false;
  if (what)
    *what = "NCCL communicator '" + calls_.name() + "': " +
            (aborted_ ? std::string("aborted")
                      : std::string(ncclGetErrorString(state)) + ": " + ncclGetLastError(comm_));
  return true;
}

// Under abort_mutex_: the watchdog thread asks while the issuing thread may be aborting (or the
// reverse), and an aborted communicator must not be asked.
ncclResult_t NcclCommunicator::async_error() const {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_) return ncclInvalidUsage;  // no communicator left to ask
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  return rc != ncclSuccess ? rc : state;
}

void NcclCommunicator::abort() {
  if (comm_ == nullptr || aborted_) return;
  if (std::this_thread::get_id() != owner_) aborted_elsewhere_ = true;  // seen before aborted_
  std::lock_guard<std::mutex> lock(abort_mutex_);
  if (aborted_.exchange(true)) return;
  ncclCommAbort(comm_);
}

std::string NcclCommunicator::async_failure() {
  if (aborted_) return "";  // by the issuing thread, which reports why
  std::string what;
  return poll_error(&what) ? what : std::string();
}

std::optional<CallInfo> NcclCommunicator::oldest_incomplete() {
  if (cudaSetDevice(device_) != cudaSuccess) return std::nullopt;  // this thread's device
  std::lock_guard<std::mutex> lock(watched_mutex_);
  while (watched_count_ > 0) {
    const Watched& w = watched_[watched_first_];
    if (cudaEventQuery(w.done.get()) != cudaSuccess) return w.call;  // not ready, or failed
    watched_first_ = (watched_first_ + 1) % kWatched;
    --watched_count_;
  }
  return std::nullopt;
}

void NcclCommunicator::watch(const CallInfo& call) {
  const Clock::time_point deadline = deadline_after(timeout_s_);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(watched_mutex_);
      while (watched_count_ > 0 &&
             cudaEventQuery(watched_[watched_first_].done.get()) == cudaSuccess) {
        watched_first_ = (watched_first_ + 1) % kWatched;
        --watched_count_;
      }
      if (watched_count_ < kWatched) {
        Watched& w = watched_[(watched_first_ + watched_count_) % kWatched];
        CUDA_CHECK(cudaEventRecord(w.done.get(), stream_.get()));
        w.call = call;
        ++watched_count_;
        return;
      }
    }
    // The ring is full: wait (unlocked, so the watchdog can still look) for the oldest.
    std::string what;
    if (poll_error(&what)) fail(what);
    if (Clock::now() > deadline)
      fail("NCCL communicator '" + calls_.name() + "': " + std::to_string(kWatched) +
           " operations still incomplete after " + std::to_string(timeout_s_) +
           " s; communicator aborted");
    std::this_thread::yield();
  }
}

void NcclCommunicator::after_compute() {
  CUDA_CHECK(cudaEventRecord(ready_.get(), compute_));
  CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), ready_.get(), 0));
}

void NcclCommunicator::begin() {
  require_usable();
  flush();
  after_compute();
}

void NcclCommunicator::finish_blocking() {
  CUDA_CHECK(cudaEventRecord(blocking_done_.get(), stream_.get()));
  const Clock::time_point deadline = deadline_after(timeout_s_);
  while (true) {
    const cudaError_t status = cudaEventQuery(blocking_done_.get());
    if (status == cudaSuccess) return;
    if (status != cudaErrorNotReady) CUDA_CHECK(status);
    std::string what;
    if (poll_error(&what)) fail(what);
    if (Clock::now() > deadline)
      fail("NCCL communicator '" + calls_.name() + "': a blocking call did not complete in " +
           std::to_string(timeout_s_) + " s; communicator aborted");
    std::this_thread::yield();
  }
}

int NcclCommunicator::acquire_slot(const char* op, uint64_t bytes, int peer) {
  require_usable();
  const int id = slots_.acquire();
  if (!slots_[id].done) slots_[id].done = make_event();  // a new slot
  slots_[id].call = calls_.enter(op, bytes, peer);
  return id;
}

void NcclCommunicator::end_started(int slot) {
  CUDA_CHECK(cudaEventRecord(slots_[slot].done.get(), stream_.get()));
  watch(slots_[slot].call);
}

void NcclCommunicator::flush() {
  if (queued_.empty()) return;
  NCCL_CHECK(ncclGroupStart());
  for (const P2p& p : queued_) {
    if (p.send)
      NCCL_CHECK(ncclSend(p.data, p.n, p.type, p.peer, comm_, stream_.get()));
    else
      NCCL_CHECK(ncclRecv(p.data, p.n, p.type, p.peer, comm_, stream_.get()));
  }
  NCCL_CHECK(ncclGroupEnd());
  for (const P2p& p : queued_) {
    end_started(p.slot);
    slots_[p.slot].queued = false;
  }
  queued_.clear();
}

template <typename E>
void NcclCommunicator::all_reduce_typed(E* data, size_t n, ncclDataType_t type, ReduceOp op) {
  BlockedTimer block(blocked_seconds_, calls_, "all_reduce", n * sizeof(E));
  count_sent(all_reduce_bus_bytes(n * sizeof(E), size_));
  begin();
  NCCL_CHECK(ncclAllReduce(data, data, n, type, nccl_op(op), comm_, stream_.get()));
  finish_blocking();
}

void NcclCommunicator::all_reduce(float* data, size_t n, ReduceOp op) {
  all_reduce_typed(data, n, ncclFloat, op);
}

void NcclCommunicator::all_reduce(double* data, size_t n, ReduceOp op) {
  all_reduce_typed(data, n, ncclDouble, op);
}

void NcclCommunicator::all_reduce(int64_t* data, size_t n, ReduceOp op) {
  all_reduce_typed(data, n, ncclInt64, op);
}

// NCCL sums 2-byte floats as the interface says: each partial sum rounded to the type.
void NcclCommunicator::all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) {
  if (op != ReduceOp::Sum || dtype == Precision::Fp32) {
    std::string msg = calls_.name();
    msg += " all_reduce of 2-byte elements: only a Sum of bf16 or fp16, not a ";
    msg += op == ReduceOp::Sum ? "Sum" : op == ReduceOp::Max ? "Max" : "Min";
    msg += " of ";
    msg += to_string(dtype);
    MPITRAIN_THROW(msg);
  }
  all_reduce_typed(data, n, dtype == Precision::Bf16 ? ncclBfloat16 : ncclFloat16, op);
}

void NcclCommunicator::broadcast(void* data, size_t bytes, int root) {
  BlockedTimer block(blocked_seconds_, calls_, "broadcast", bytes);
  count_sent(point_bus_bytes(bytes, size_));
  begin();
  NCCL_CHECK(ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_.get()));
  finish_blocking();
}

// NCCL has no barrier: an all-reduce of one float, completed on the host.
void NcclCommunicator::barrier() {
  BlockedTimer block(blocked_seconds_, calls_, "barrier", 0);
  begin();
  NCCL_CHECK(ncclAllReduce(barrier_token_.get(), barrier_token_.get(), 1, ncclFloat, ncclMax,
                           comm_, stream_.get()));
  finish_blocking();
}

// In place (in == out + rank * n) is NCCL's own in-place form.
void NcclCommunicator::all_gather_blocking(const void* in, void* out, size_t n, size_t element,
                                           ncclDataType_t type) {
  BlockedTimer block(blocked_seconds_, calls_, "all_gather", size_ * n * element);
  count_sent(blocks_bus_bytes(size_ * n * element, n * element, size_));
  begin();
  NCCL_CHECK(ncclAllGather(in, out, n, type, comm_, stream_.get()));
  finish_blocking();
}

// In place (out == in + rank * n) is NCCL's own in-place form.
void NcclCommunicator::reduce_scatter_blocking(const void* in, void* out, size_t n, size_t element,
                                               ncclDataType_t type, ReduceOp op) {
  BlockedTimer block(blocked_seconds_, calls_, "reduce_scatter", size_ * n * element);
  count_sent(blocks_bus_bytes(size_ * n * element, n * element, size_));
  begin();
  NCCL_CHECK(ncclReduceScatter(in, out, n, type, nccl_op(op), comm_, stream_.get()));
  finish_blocking();
}

void NcclCommunicator::all_gather(const float* in, float* out, size_t n) {
  all_gather_blocking(in, out, n, sizeof(float), ncclFloat);
}

void NcclCommunicator::all_gather(const uint16_t* in, uint16_t* out, size_t n) {
  all_gather_blocking(in, out, n, sizeof(uint16_t), kTwoBytes);
}

void NcclCommunicator::reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) {
  reduce_scatter_blocking(in, out, n, sizeof(float), ncclFloat, op);
}

// NCCL sums 2-byte floats as the interface says: each partial sum rounded to the type.
void NcclCommunicator::reduce_scatter(const uint16_t* in, uint16_t* out, size_t n, Precision dtype,
                                      ReduceOp op) {
  if (op != ReduceOp::Sum || dtype == Precision::Fp32)
    MPITRAIN_THROW(calls_.name() + " reduce_scatter of 2-byte elements: only a Sum of bf16 or fp16");
  reduce_scatter_blocking(in, out, n, sizeof(uint16_t),
                       dtype == Precision::Bf16 ? ncclBfloat16 : ncclFloat16, op);
}

CommHandle NcclCommunicator::all_reduce_start(float* data, size_t n, ReduceOp op) {
  const int id = acquire_slot("all_reduce", n * sizeof(float));
  count_sent(all_reduce_bus_bytes(n * sizeof(float), size_));
  begin();
  NCCL_CHECK(ncclAllReduce(data, data, n, ncclFloat, nccl_op(op), comm_, stream_.get()));
  end_started(id);
  return CommHandle{id};
}

template <typename E>
CommHandle NcclCommunicator::p2p_start(bool send, E* data, size_t n, ncclDataType_t type,
                                       int peer) {
  const int id = acquire_slot(send ? "send" : "recv", n * sizeof(E), peer);
  if (send) count_sent(point_bus_bytes(n * sizeof(E), size_));
  after_compute();
  queued_.push_back({send, data, n, type, peer, id});
  slots_[id].queued = true;
  return CommHandle{id};
}

CommHandle NcclCommunicator::send_start(const float* data, size_t n, int peer, int) {
  return p2p_start(true, const_cast<float*>(data), n, ncclFloat, peer);
}

CommHandle NcclCommunicator::recv_start(float* data, size_t n, int peer, int) {
  return p2p_start(false, data, n, ncclFloat, peer);
}

CommHandle NcclCommunicator::send_start(const uint16_t* data, size_t n, int peer, int) {
  return p2p_start(true, const_cast<uint16_t*>(data), n, kTwoBytes, peer);
}

CommHandle NcclCommunicator::recv_start(uint16_t* data, size_t n, int peer, int) {
  return p2p_start(false, data, n, kTwoBytes, peer);
}

CommHandle NcclCommunicator::all_to_all_start(const void* in, void* out, size_t bytes) {
  const int id = acquire_slot("all_to_all", size_ * bytes);
  count_sent(all_to_all_bus_bytes(bytes, size_));
  begin();
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size_; ++r) {
    NCCL_CHECK(ncclSend(src + r * bytes, bytes, ncclUint8, r, comm_, stream_.get()));
    NCCL_CHECK(ncclRecv(dst + r * bytes, bytes, ncclUint8, r, comm_, stream_.get()));
  }
  NCCL_CHECK(ncclGroupEnd());
  end_started(id);
  return CommHandle{id};
}

CommHandle NcclCommunicator::all_gather_start(const void* in, void* out, size_t bytes) {
  const int id = acquire_slot("all_gather", size_ * bytes);
  count_sent(blocks_bus_bytes(size_ * bytes, bytes, size_));
  begin();
  NCCL_CHECK(ncclAllGather(in, out, bytes, ncclUint8, comm_, stream_.get()));
  end_started(id);
  return CommHandle{id};
}

// Grouped sends and receives, one pair per rank (a 0-byte block is skipped).
CommHandle NcclCommunicator::all_to_allv_start(const void* in, std::span<const size_t> send,
                                               void* out, std::span<const size_t> recv) {
  const size_t sent = blocks_total(send, "all_to_allv_start");
  const size_t received = blocks_total(recv, "all_to_allv_start");
  const int id = acquire_slot("all_to_allv", sent + received);
  count_sent(blocks_bus_bytes(sent, send[rank_], size_));
  begin();
  const auto* src = static_cast<const char*>(in);
  auto* dst = static_cast<char*>(out);
  NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size_; ++r) {
    if (send[r] > 0) NCCL_CHECK(ncclSend(src, send[r], ncclUint8, r, comm_, stream_.get()));
    if (recv[r] > 0) NCCL_CHECK(ncclRecv(dst, recv[r], ncclUint8, r, comm_, stream_.get()));
    src += send[r];
    dst += recv[r];
  }
  NCCL_CHECK(ncclGroupEnd());
  end_started(id);
  return CommHandle{id};
}

size_t NcclCommunicator::blocks_total(std::span<const size_t> counts, const char* op) const {
  if (counts.size() != static_cast<size_t>(size_))
    MPITRAIN_THROW(std::string(op) + ": " + std::to_string(counts.size()) + " counts for " +
                   std::to_string(size_) + " ranks");
  size_t total = 0;
  for (size_t count : counts) total += count;
  return total;
}

CommHandle NcclCommunicator::reduce_scatter_start(float* data, std::span<const size_t> counts,
                                                  ReduceOp op) {
  const size_t total = blocks_total(counts, "reduce_scatter_start");
  const int id = acquire_slot("reduce_scatter", total * sizeof(float));
  count_sent(blocks_bus_bytes(total * sizeof(float), counts[rank_] * sizeof(float), size_));
  begin();
  NCCL_CHECK(ncclGroupStart());
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {  // in place: the owner's sum lands where its block is
    if (counts[r] > 0)
      NCCL_CHECK(ncclReduce(data + offset, data + offset, counts[r], ncclFloat, nccl_op(op), r,
                            comm_, stream_.get()));
    offset += counts[r];
  }
  NCCL_CHECK(ncclGroupEnd());
  end_started(id);
  return CommHandle{id};
}

template <typename E>
CommHandle NcclCommunicator::all_gather_typed(E* data, std::span<const size_t> counts,
                                              ncclDataType_t type) {
  const size_t total = blocks_total(counts, "all_gather_start");
  const int id = acquire_slot("all_gather", total * sizeof(E));
  count_sent(blocks_bus_bytes(total * sizeof(E), counts[rank_] * sizeof(E), size_));
  begin();
  NCCL_CHECK(ncclGroupStart());
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    if (counts[r] > 0)
      NCCL_CHECK(
          ncclBroadcast(data + offset, data + offset, counts[r], type, r, comm_, stream_.get()));
    offset += counts[r];
  }
  NCCL_CHECK(ncclGroupEnd());
  end_started(id);
  return CommHandle{id};
}

CommHandle NcclCommunicator::all_gather_start(float* data, std::span<const size_t> counts) {
  return all_gather_typed(data, counts, ncclFloat);
}

CommHandle NcclCommunicator::all_gather_start(uint16_t* data, std::span<const size_t> counts) {
  return all_gather_typed(data, counts, kTwoBytes);
}

void NcclCommunicator::wait(CommHandle handle) {
  Slot& slot = slots_.pending(handle.id);
  if (slot.queued) flush();
  CUDA_CHECK(cudaStreamWaitEvent(compute_, slot.done.get(), 0));
  slots_.release(handle.id);
}

void NcclCommunicator::progress() {
  require_usable();
  flush();
  std::string what;
  if (poll_error(&what)) fail(what);
}

}  // namespace mpitrain
