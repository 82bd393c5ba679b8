#include <algorithm>
#include <chrono>
#include <string>

#include "mpitrain/comm/communicator.hpp"

namespace mpitrain {

namespace {

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return MPI_SUM;
    case ReduceOp::Max: return MPI_MAX;
    case ReduceOp::Min: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// Adds the wall time of its scope to a blocked-seconds total.
class BlockedTimer {
 public:
  explicit BlockedTimer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~BlockedTimer() {
    total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  BlockedTimer(const BlockedTimer&) = delete;
  BlockedTimer& operator=(const BlockedTimer&) = delete;

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

// [0, n) in pieces of at most max_count elements: f(offset, count) for each.
template <typename F>
void for_each_chunk(size_t n, size_t max_count, F&& f) {
  for (size_t done = 0; done < n; done += max_count)
    f(done, static_cast<int>(std::min(max_count, n - done)));
}

template <typename E>
void all_reduce_chunked(MPI_Comm comm, size_t max_count, E* data, size_t n, MPI_Datatype type,
                        ReduceOp op) {
  for_each_chunk(n, max_count, [&](size_t off, int count) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, count, type, mpi_op(op), comm));
  });
}

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, size_t max_count)
    : comm_(comm), max_count_(max_count) {
  if (max_count_ < 1 || max_count_ > kMaxMpiCount)
    MPITRAIN_THROW("max_count " + std::to_string(max_count_) + " is not in [1, INT_MAX]");
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiCommunicator::all_reduce(float* data, size_t n, ReduceOp op) {
  BlockedTimer timer(blocked_seconds_);
  all_reduce_chunked(comm_, max_count_, data, n, MPI_FLOAT, op);
}

void MpiCommunicator::all_reduce(double* data, size_t n, ReduceOp op) {
  BlockedTimer timer(blocked_seconds_);
  all_reduce_chunked(comm_, max_count_, data, n, MPI_DOUBLE, op);
}

void MpiCommunicator::all_reduce(int64_t* data, size_t n, ReduceOp op) {
  BlockedTimer timer(blocked_seconds_);
  all_reduce_chunked(comm_, max_count_, data, n, MPI_INT64_T, op);
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  BlockedTimer timer(blocked_seconds_);
  auto* p = static_cast<char*>(data);
  for_each_chunk(bytes, max_count_, [&](size_t off, int count) {
    MPI_CHECK(MPI_Bcast(p + off, count, MPI_BYTE, root, comm_));
  });
}

void MpiCommunicator::barrier() {
  BlockedTimer timer(blocked_seconds_);
  MPI_CHECK(MPI_Barrier(comm_));
}

void MpiCommunicator::all_gather(const float* in, float* out, size_t n) {
  BlockedTimer timer(blocked_seconds_);
  const bool in_place = in == out + rank_ * n;
  if (n <= max_count_) {
    const int count = static_cast<int>(n);
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : in, count, MPI_FLOAT, out, count, MPI_FLOAT,
                            comm_));
    return;
  }
  // Too large for one call: every block is broadcast from its owner, piece by piece.
  if (!in_place) std::copy(in, in + n, out + rank_ * n);
  for (int root = 0; root < size_; ++root)
    for_each_chunk(n, max_count_, [&](size_t off, int count) {
      MPI_CHECK(MPI_Bcast(out + root * n + off, count, MPI_FLOAT, root, comm_));
    });
}

void MpiCommunicator::reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) {
  BlockedTimer timer(blocked_seconds_);
  const bool in_place = out == in + rank_ * n;
  if (n <= max_count_) {
    const int count = static_cast<int>(n);
    if (!in_place) {
      MPI_CHECK(MPI_Reduce_scatter_block(in, out, count, MPI_FLOAT, mpi_op(op), comm_));
      return;
    }
    // MPI's in-place form reads the whole buffer and leaves this rank's result at its start.
    float* whole = out - rank_ * n;
    MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, count, MPI_FLOAT, mpi_op(op), comm_));
    if (rank_ != 0) std::copy(whole, whole + n, out);
    return;
  }
  // Too large for one call: every block is reduced onto its owner, piece by piece.
  for (int root = 0; root < size_; ++root)
    for_each_chunk(n, max_count_, [&](size_t off, int count) {
      const float* block = in + root * n + off;
      const bool mine = root == rank_;
      MPI_CHECK(MPI_Reduce(mine && in_place ? MPI_IN_PLACE : block, mine ? out + off : nullptr,
                           count, MPI_FLOAT, mpi_op(op), root, comm_));
    });
}

int MpiCommunicator::acquire_slot() {
  int id;
  if (free_slots_.empty()) {
    id = static_cast<int>(slots_.size());
    slots_.emplace_back();
    free_slots_.reserve(slots_.size());  // so that wait() never allocates
  } else {
    id = free_slots_.back();
    free_slots_.pop_back();
  }
  slots_[id].busy = true;
  return id;
}

CommHandle MpiCommunicator::all_reduce_start(float* data, size_t n, ReduceOp op) {
  const int id = acquire_slot();
  std::vector<MPI_Request>& requests = slots_[id].requests;
  for_each_chunk(n, max_count_, [&](size_t off, int count) {
    requests.push_back(MPI_REQUEST_NULL);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, mpi_op(op), comm_,
                             &requests.back()));
  });
  return CommHandle{id};
}

// Pieces of one message share the tag: MPI keeps their order between the same two ranks.
CommHandle MpiCommunicator::send_start(const float* data, size_t n, int peer, int tag) {
  const int id = acquire_slot();
  std::vector<MPI_Request>& requests = slots_[id].requests;
  for_each_chunk(n, max_count_, [&](size_t off, int count) {
    requests.push_back(MPI_REQUEST_NULL);
    MPI_CHECK(MPI_Isend(data + off, count, MPI_FLOAT, peer, tag, comm_, &requests.back()));
  });
  return CommHandle{id};
}

CommHandle MpiCommunicator::recv_start(float* data, size_t n, int peer, int tag) {
  const int id = acquire_slot();
  std::vector<MPI_Request>& requests = slots_[id].requests;
  for_each_chunk(n, max_count_, [&](size_t off, int count) {
    requests.push_back(MPI_REQUEST_NULL);
    MPI_CHECK(MPI_Irecv(data + off, count, MPI_FLOAT, peer, tag, comm_, &requests.back()));
  });
  return CommHandle{id};
}

void MpiCommunicator::wait(CommHandle handle) {
  if (handle.id < 0 || handle.id >= static_cast<int>(slots_.size()) || !slots_[handle.id].busy)
    MPITRAIN_THROW("wait() on handle " + std::to_string(handle.id) + ", which is not pending");
  BlockedTimer timer(blocked_seconds_);
  Slot& slot = slots_[handle.id];
  MPI_CHECK(MPI_Waitall(static_cast<int>(slot.requests.size()), slot.requests.data(),
                        MPI_STATUSES_IGNORE));
  slot.requests.clear();
  slot.busy = false;
  free_slots_.push_back(handle.id);
}

void MpiCommunicator::progress() {
  for (Slot& slot : slots_) {
    if (!slot.busy) continue;
    int done = 0;  // completed requests become MPI_REQUEST_NULL; wait() then returns at once
    MPI_CHECK(MPI_Testall(static_cast<int>(slot.requests.size()), slot.requests.data(), &done,
                          MPI_STATUSES_IGNORE));
  }
}

}  // namespace mpitrain
