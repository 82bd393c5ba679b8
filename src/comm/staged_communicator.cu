#include "mpitrain/comm/staged_communicator.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// Uneven blocks in rank order: where `rank`'s block starts, and the elements of all of them.
struct BlockSpan {
  size_t offset = 0, total = 0;
};
BlockSpan block_span(std::span<const size_t> counts, int rank) {
  BlockSpan b;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (static_cast<int>(r) < rank) b.offset += counts[r];
    b.total += counts[r];
  }
  return b;
}

}  // namespace

void StagedMpiCommunicator::HostDeleter::operator()(void* p) const { cudaFreeHost(p); }
void StagedMpiCommunicator::EventDeleter::operator()(cudaEvent_t e) const { cudaEventDestroy(e); }

StagedMpiCommunicator::Stage StagedMpiCommunicator::make_stage(size_t bytes) {
  Stage s;
  void* p = nullptr;
  CUDA_CHECK(cudaMallocHost(&p, bytes));
  s.host.reset(p);
  s.size = bytes;
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  s.copied.reset(e);
  return s;
}

StagedMpiCommunicator::StagedMpiCommunicator(MpiCommunicator& mpi, cudaStream_t compute,
                                             size_t max_bytes, const std::vector<size_t>& started)
    : DeviceMpiCommunicator(mpi, compute), max_bytes_(max_bytes) {
  if (max_bytes_ < 1) MPITRAIN_THROW("staging needs max_bytes >= 1");
  blocking_ = make_stage(max_bytes_);
  for (size_t bytes : started) stages_.push_back(make_stage(std::max<size_t>(bytes, 1)));
}

size_t StagedMpiCommunicator::pinned_bytes() const {
  size_t bytes = blocking_.size;
  for (const Stage& s : stages_) bytes += s.size;
  return bytes;
}

void StagedMpiCommunicator::need(size_t bytes, const char* op) const {
  if (bytes > max_bytes_)
    MPITRAIN_THROW(std::string(op) + " stages " + std::to_string(bytes) +
                   " bytes, more than the staging buffers' " + std::to_string(max_bytes_) +
                   ": construct StagedMpiCommunicator with a larger max_bytes");
}

int StagedMpiCommunicator::acquire(size_t bytes, const char* op) {
  int best = -1;
  size_t busy = 0, larger = 0;  // for the message
  for (size_t i = 0; i < stages_.size(); ++i) {
    const Stage& s = stages_[i];
    if (s.size < bytes) continue;
    ++larger;
    if (s.busy) ++busy;
    else if (best < 0 || s.size < stages_[best].size) best = static_cast<int>(i);
  }
  if (best < 0)
    MPITRAIN_THROW(std::string(op) + " stages " + std::to_string(bytes) + " bytes: " +
                   std::to_string(larger) + " of the " + std::to_string(stages_.size()) +
                   " started-call buffers hold that many, and " + std::to_string(busy) +
                   " of them are in flight: construct StagedMpiCommunicator with a buffer of "
                   "that size for every such call in flight at once");
  Stage& s = stages_[best];
  CUDA_CHECK(cudaEventSynchronize(s.copied.get()));  // its last copy back has read it
  s.busy = true;
  return best;
}

void StagedMpiCommunicator::to_host(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, compute_));
}

void StagedMpiCommunicator::to_device(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, compute_));
}

CommHandle StagedMpiCommunicator::started(int stage, CommHandle mpi, void* dst, size_t offset,
                                          size_t bytes) {
  Stage& s = stages_[stage];
  s.mpi = mpi;
  s.dst = dst;
  s.offset = offset;
  s.bytes = bytes;
  return CommHandle{stage};
}

template <typename E, typename... How>
void StagedMpiCommunicator::all_reduce_typed(E* data, size_t n, How... how) {
  const size_t bytes = n * sizeof(E);
  need(bytes, "all_reduce");
  auto* h = reinterpret_cast<E*>(host(blocking_));
  to_host(h, data, bytes);
  sync_compute();
  mpi_.all_reduce(h, n, how...);
  to_device(data, h, bytes);
}

void StagedMpiCommunicator::all_reduce(float* data, size_t n, ReduceOp op) {
  all_reduce_typed(data, n, op);
}

void StagedMpiCommunicator::all_reduce(double* data, size_t n, ReduceOp op) {
  all_reduce_typed(data, n, op);
}

void StagedMpiCommunicator::all_reduce(int64_t* data, size_t n, ReduceOp op) {
  all_reduce_typed(data, n, op);
}

void StagedMpiCommunicator::all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) {
  all_reduce_typed(data, n, dtype, op);
}

void StagedMpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  need(bytes, "broadcast");
  const bool mine = rank() == root;
  if (mine) to_host(host(blocking_), data, bytes);
  sync_compute();  // also: the last copy back from the buffer is done before MPI writes it
  mpi_.broadcast(host(blocking_), bytes, root);
  if (!mine) to_device(data, host(blocking_), bytes);
}

template <typename E>
void StagedMpiCommunicator::all_gather_typed(const E* in, E* out, size_t n) {
  const size_t block = n * sizeof(E);
  need(size() * block, "all_gather");
  auto* h = reinterpret_cast<E*>(host(blocking_));
  to_host(h + rank() * n, in, block);
  sync_compute();
  mpi_.all_gather(h + rank() * n, h, n);  // in place
  to_device(out, h, size() * block);
}

template <typename E, typename... How>
void StagedMpiCommunicator::reduce_scatter_typed(const E* in, E* out, size_t n, How... how) {
  const size_t block = n * sizeof(E);
  need(size() * block, "reduce_scatter");
  auto* h = reinterpret_cast<E*>(host(blocking_));
  to_host(h, in, size() * block);
  sync_compute();
  mpi_.reduce_scatter(h, h + rank() * n, n, how...);  // in place
  to_device(out, h + rank() * n, block);
}

void StagedMpiCommunicator::all_gather(const float* in, float* out, size_t n) {
  all_gather_typed(in, out, n);
}

void StagedMpiCommunicator::all_gather(const uint16_t* in, uint16_t* out, size_t n) {
  all_gather_typed(in, out, n);
}

void StagedMpiCommunicator::reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) {
  reduce_scatter_typed(in, out, n, op);
}

void StagedMpiCommunicator::reduce_scatter(const uint16_t* in, uint16_t* out, size_t n,
                                           Precision dtype, ReduceOp op) {
  reduce_scatter_typed(in, out, n, dtype, op);
}

CommHandle StagedMpiCommunicator::all_reduce_start(float* data, size_t n, ReduceOp op) {
  const size_t bytes = n * sizeof(float);
  const int s = acquire(bytes, "all_reduce_start");
  auto* h = reinterpret_cast<float*>(host(stages_[s]));
  to_host(h, data, bytes);
  sync_compute();
  return started(s, mpi_.all_reduce_start(h, n, op), data, 0, bytes);
}

template <typename E>
CommHandle StagedMpiCommunicator::send_typed(const E* data, size_t n, int peer, int tag) {
  const size_t bytes = n * sizeof(E);
  const int s = acquire(bytes, "send_start");
  auto* h = reinterpret_cast<E*>(host(stages_[s]));
  to_host(h, data, bytes);
  sync_compute();
  return started(s, mpi_.send_start(h, n, peer, tag), nullptr, 0, 0);
}

template <typename E>
CommHandle StagedMpiCommunicator::recv_typed(E* data, size_t n, int peer, int tag) {
  const size_t bytes = n * sizeof(E);
  const int s = acquire(bytes, "recv_start");
  auto* h = reinterpret_cast<E*>(host(stages_[s]));
  return started(s, mpi_.recv_start(h, n, peer, tag), data, 0, bytes);
}

CommHandle StagedMpiCommunicator::send_start(const float* data, size_t n, int peer, int tag) {
  return send_typed(data, n, peer, tag);
}

CommHandle StagedMpiCommunicator::recv_start(float* data, size_t n, int peer, int tag) {
  return recv_typed(data, n, peer, tag);
}

CommHandle StagedMpiCommunicator::send_start(const uint16_t* data, size_t n, int peer, int tag) {
  return send_typed(data, n, peer, tag);
}

CommHandle StagedMpiCommunicator::recv_start(uint16_t* data, size_t n, int peer, int tag) {
  return recv_typed(data, n, peer, tag);
}

// Staging: in(size * bytes), then out(size * bytes).
CommHandle StagedMpiCommunicator::all_to_all_start(const void* in, void* out, size_t bytes) {
  const size_t total = size() * bytes;
  const int s = acquire(2 * total, "all_to_all_start");
  char* h = host(stages_[s]);
  to_host(h, in, total);
  sync_compute();
  return started(s, mpi_.all_to_all_start(h, h + total, bytes), out, total, total);
}

// Staging: out(size * bytes), then in(bytes) (MPI's send and receive buffers may not overlap).
CommHandle StagedMpiCommunicator::all_gather_start(const void* in, void* out, size_t bytes) {
  const size_t total = size() * bytes;
  const int s = acquire(total + bytes, "all_gather_start");
  char* h = host(stages_[s]);
  to_host(h + total, in, bytes);
  sync_compute();
  return started(s, mpi_.all_gather_start(h + total, h, bytes), out, 0, total);
}

// Staging: in(sum of send), then out(sum of recv).
CommHandle StagedMpiCommunicator::all_to_allv_start(const void* in, std::span<const size_t> send,
                                                    void* out, std::span<const size_t> recv) {
  const size_t sent = block_span(send, 0).total, received = block_span(recv, 0).total;
  const int s = acquire(sent + received, "all_to_allv_start");
  char* h = host(stages_[s]);
  to_host(h, in, sent);
  sync_compute();
  return started(s, mpi_.all_to_allv_start(h, send, h + sent, recv), out, sent, received);
}

CommHandle StagedMpiCommunicator::reduce_scatter_start(float* data,
                                                       std::span<const size_t> counts,
                                                       ReduceOp op) {
  const auto [offset, total] = block_span(counts, rank());
  const int s = acquire(total * sizeof(float), "reduce_scatter_start");
  auto* h = reinterpret_cast<float*>(host(stages_[s]));
  to_host(h, data, total * sizeof(float));
  sync_compute();
  const CommHandle mpi = mpi_.reduce_scatter_start(h, counts, op);  // this rank's block at offset
  return started(s, mpi, data + offset, offset * sizeof(float), counts[rank()] * sizeof(float));
}

template <typename E>
CommHandle StagedMpiCommunicator::all_gather_typed(E* data, std::span<const size_t> counts) {
  const auto [offset, total] = block_span(counts, rank());
  const int s = acquire(total * sizeof(E), "all_gather_start");
  auto* h = reinterpret_cast<E*>(host(stages_[s]));
  if (static_cast<size_t>(rank()) < counts.size())
    to_host(h + offset, data + offset, counts[rank()] * sizeof(E));
  sync_compute();
  return started(s, mpi_.all_gather_start(h, counts), data, 0, total * sizeof(E));
}

CommHandle StagedMpiCommunicator::all_gather_start(float* data, std::span<const size_t> counts) {
  return all_gather_typed(data, counts);
}

CommHandle StagedMpiCommunicator::all_gather_start(uint16_t* data, std::span<const size_t> counts) {
  return all_gather_typed(data, counts);
}

void StagedMpiCommunicator::wait(CommHandle handle) {
  if (handle.id < 0 || handle.id >= static_cast<int>(stages_.size()) || !stages_[handle.id].busy)
    MPITRAIN_THROW("wait() on handle " + std::to_string(handle.id) + ", which is not pending");
  Stage& s = stages_[handle.id];
  mpi_.wait(s.mpi);
  to_device(s.dst, host(s) + s.offset, s.bytes);
  CUDA_CHECK(cudaEventRecord(s.copied.get(), compute_));
  s.busy = false;
}

}  // namespace mpitrain
