#include <algorithm>
#include <string>

#include "mpitrain/comm/bus_bytes.hpp"
#include "mpitrain/comm/call_tracking.hpp"
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

// all_reduce_each's operation on (operation, value) pairs of doubles: the operation travels with
// each value, so one stateless MPI_Op serves any mix.
void reduce_pairs(void* in, void* inout, int* len, MPI_Datatype*) {
  const double* a = static_cast<const double*>(in);
  double* b = static_cast<double*>(inout);
  for (int i = 0; i < 2 * *len; i += 2) {
    switch (static_cast<ReduceOp>(static_cast<int>(a[i]))) {
      case ReduceOp::Sum: b[i + 1] += a[i + 1]; break;
      case ReduceOp::Max: b[i + 1] = std::max(b[i + 1], a[i + 1]); break;
      case ReduceOp::Min: b[i + 1] = std::min(b[i + 1], a[i + 1]); break;
    }
  }
}

// Sums of 2-byte values for all_reduce(uint16_t*): each partial sum in fp32, rounded to the type.
template <Precision P>
void sum_halves(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = to_half_bits(from_half_bits(a[i], P) + from_half_bits(b[i], P), P);
}

}  // namespace

// The MPI operations summing bf16 and fp16 values, made on the first 2-byte all_reduce and freed
// with the communicator.
class MpiCommunicator::HalfSums {
 public:
  HalfSums() {
    MPI_CHECK(MPI_Op_create(sum_halves<Precision::Bf16>, /*commute=*/1, &bf16_));
    MPI_CHECK(MPI_Op_create(sum_halves<Precision::Fp16>, /*commute=*/1, &fp16_));
  }
  ~HalfSums() {
    MPI_Op_free(&fp16_);
    MPI_Op_free(&bf16_);
  }
  HalfSums(const HalfSums&) = delete;
  HalfSums& operator=(const HalfSums&) = delete;
  MPI_Op sum(Precision dtype) const { return dtype == Precision::Bf16 ? bf16_ : fp16_; }

 private:
  MPI_Op bf16_ = MPI_OP_NULL, fp16_ = MPI_OP_NULL;
};

// The pair datatype and the operation (MPI handles), made on the first all_reduce_each and
// freed with the communicator.
class MpiCommunicator::PairReduction {
 public:
  PairReduction() {
    MPI_CHECK(MPI_Type_contiguous(2, MPI_DOUBLE, &type_));
    MPI_CHECK(MPI_Type_commit(&type_));
    MPI_CHECK(MPI_Op_create(reduce_pairs, /*commute=*/1, &op_));
  }
  ~PairReduction() {
    MPI_Op_free(&op_);
    MPI_Type_free(&type_);
  }
  PairReduction(const PairReduction&) = delete;
  PairReduction& operator=(const PairReduction&) = delete;
  MPI_Datatype type() const { return type_; }
  MPI_Op op() const { return op_; }

 private:
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Op op_ = MPI_OP_NULL;
};

MpiCommunicator::~MpiCommunicator() = default;

void MpiCommunicator::all_reduce_each(double* data, const ReduceOp* ops, size_t n) {
  if (n > kMaxEach) MPITRAIN_THROW("all_reduce_each: " + std::to_string(n) + " values, at most " +
                                  std::to_string(kMaxEach));
  BlockedTimer timer(blocked_seconds_, calls_, "all_reduce", n * sizeof(double));
  count_sent(all_reduce_bus_bytes(n * sizeof(double), size_));
  double pairs[2 * kMaxEach];
  for (size_t i = 0; i < n; ++i) {
    pairs[2 * i] = static_cast<double>(static_cast<int>(ops[i]));
    pairs[2 * i + 1] = data[i];
  }
  if (!pairs_) pairs_ = std::make_unique<PairReduction>();
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, pairs, static_cast<int>(n), pairs_->type(), pairs_->op(),
                          comm_));
  for (size_t i = 0; i < n; ++i) data[i] = pairs[2 * i + 1];
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, size_t max_count)
    : comm_(comm), max_count_(max_count), calls_(std::move(name), world_ranks_of(comm)) {
  if (max_count_ < 1 || max_count_ > kMaxMpiCount)
    MPITRAIN_THROW("max_count " + std::to_string(max_count_) + " is not in [1, INT_MAX]");
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

void MpiCommunicator::all_reduce(float* data, size_t n, ReduceOp op) {
  BlockedTimer timer(blocked_seconds_, calls_, "all_reduce", n * sizeof(float));
  count_sent(all_reduce_bus_bytes(n * sizeof(float), size_));
  all_reduce_chunked(comm_, max_count_, data, n, MPI_FLOAT, op);
}

void MpiCommunicator::all_reduce(double* data, size_t n, ReduceOp op) {
  BlockedTimer timer(blocked_seconds_, calls_, "all_reduce", n * sizeof(double));
  count_sent(all_reduce_bus_bytes(n * sizeof(double), size_));
  all_reduce_chunked(comm_, max_count_, data, n, MPI_DOUBLE, op);
}

void MpiCommunicator::all_reduce(int64_t* data, size_t n, ReduceOp op) {
  BlockedTimer timer(blocked_seconds_, calls_, "all_reduce", n * sizeof(int64_t));
  count_sent(all_reduce_bus_bytes(n * sizeof(int64_t), size_));
  all_reduce_chunked(comm_, max_count_, data, n, MPI_INT64_T, op);
}

void MpiCommunicator::all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) {
  if (op != ReduceOp::Sum || dtype == Precision::Fp32)
    MPITRAIN_THROW("a 2-byte all_reduce is a bf16 or fp16 sum");
  BlockedTimer timer(blocked_seconds_, calls_, "all_reduce", n * sizeof(uint16_t));
  count_sent(all_reduce_bus_bytes(n * sizeof(uint16_t), size_));
  if (!half_sums_) half_sums_ = std::make_unique<HalfSums>();
  for_each_chunk(n, max_count_, [&](size_t off, int count) {
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + off, count, MPI_UINT16_T, half_sums_->sum(dtype),
                            comm_));
  });
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  BlockedTimer timer(blocked_seconds_, calls_, "broadcast", bytes);
  count_sent(point_bus_bytes(bytes, size_));
  auto* p = static_cast<char*>(data);
  for_each_chunk(bytes, max_count_, [&](size_t off, int count) {
    MPI_CHECK(MPI_Bcast(p + off, count, MPI_BYTE, root, comm_));
  });
}

void MpiCommunicator::barrier() {
  BlockedTimer timer(blocked_seconds_, calls_, "barrier", 0);
  MPI_CHECK(MPI_Barrier(comm_));
}

void MpiCommunicator::all_gather(const float* in, float* out, size_t n) {
  all_gather_typed(in, out, n, MPI_FLOAT);
}

void MpiCommunicator::all_gather(const uint16_t* in, uint16_t* out, size_t n) {
  all_gather_typed(in, out, n, MPI_UINT16_T);
}

void MpiCommunicator::reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) {
  reduce_scatter_typed(in, out, n, MPI_FLOAT, mpi_op(op));
}

void MpiCommunicator::reduce_scatter(const uint16_t* in, uint16_t* out, size_t n, Precision dtype,
                                     ReduceOp op) {
  if (op != ReduceOp::Sum || dtype == Precision::Fp32)
    MPITRAIN_THROW("a 2-byte reduce_scatter is a bf16 or fp16 sum");
  if (!half_sums_) half_sums_ = std::make_unique<HalfSums>();
  reduce_scatter_typed(in, out, n, MPI_UINT16_T, half_sums_->sum(dtype));
}

template <typename E>
void MpiCommunicator::all_gather_typed(const E* in, E* out, size_t n, MPI_Datatype type) {
  BlockedTimer timer(blocked_seconds_, calls_, "all_gather", size_ * n * sizeof(E));
  count_sent(blocks_bus_bytes(size_ * n * sizeof(E), n * sizeof(E), size_));
  const bool in_place = in == out + rank_ * n;
  if (n <= max_count_) {
    const int count = static_cast<int>(n);
    MPI_CHECK(MPI_Allgather(in_place ? MPI_IN_PLACE : in, count, type, out, count, type, comm_));
    return;
  }
  // Too large for one call: every block is broadcast from its owner, piece by piece.
  if (!in_place) std::copy(in, in + n, out + rank_ * n);
  for (int root = 0; root < size_; ++root)
    for_each_chunk(n, max_count_, [&](size_t off, int count) {
      MPI_CHECK(MPI_Bcast(out + root * n + off, count, type, root, comm_));
    });
}

template <typename E>
void MpiCommunicator::reduce_scatter_typed(const E* in, E* out, size_t n, MPI_Datatype type,
                                           MPI_Op op) {
  BlockedTimer timer(blocked_seconds_, calls_, "reduce_scatter", size_ * n * sizeof(E));
  count_sent(blocks_bus_bytes(size_ * n * sizeof(E), n * sizeof(E), size_));
  const bool in_place = out == in + rank_ * n;
  if (n <= max_count_) {
    const int count = static_cast<int>(n);
    if (!in_place) {
      MPI_CHECK(MPI_Reduce_scatter_block(in, out, count, type, op, comm_));
      return;
    }
    // MPI's in-place form reads the whole buffer and leaves this rank's result at its start.
    E* whole = out - rank_ * n;
    MPI_CHECK(MPI_Reduce_scatter_block(MPI_IN_PLACE, whole, count, type, op, comm_));
    if (rank_ != 0) std::copy(whole, whole + n, out);
    return;
  }
  // Too large for one call: every block is reduced onto its owner, piece by piece.
  for (int root = 0; root < size_; ++root)
    for_each_chunk(n, max_count_, [&](size_t off, int count) {
      const E* block = in + root * n + off;
      const bool mine = root == rank_;
      MPI_CHECK(MPI_Reduce(mine && in_place ? MPI_IN_PLACE : block, mine ? out + off : nullptr,
                           count, type, op, root, comm_));
    });
}

int MpiCommunicator::acquire_slot(const char* op, uint64_t bytes, int peer) {
  const int id = slots_.acquire();
  slots_[id].call = calls_.enter(op, bytes, peer);
  return id;
}

CommHandle MpiCommunicator::all_reduce_start(float* data, size_t n, ReduceOp op) {
  const int id = acquire_slot("all_reduce", n * sizeof(float));
  count_sent(all_reduce_bus_bytes(n * sizeof(float), size_));
  std::vector<MPI_Request>& requests = slots_[id].requests;
  for_each_chunk(n, max_count_, [&](size_t off, int count) {
    requests.push_back(MPI_REQUEST_NULL);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data + off, count, MPI_FLOAT, mpi_op(op), comm_,
                             &requests.back()));
  });
  return CommHandle{id};
}

// Pieces of one message share the tag: MPI keeps their order between the same two ranks.
template <typename E>
CommHandle MpiCommunicator::point_start(bool send, E* data, size_t n, MPI_Datatype type, int peer,
                                        int tag) {
  const int id = acquire_slot(send ? "send" : "recv", n * sizeof(E), peer);
  if (send) count_sent(point_bus_bytes(n * sizeof(E), size_));
  std::vector<MPI_Request>& requests = slots_[id].requests;
  for_each_chunk(n, max_count_, [&](size_t off, int count) {
    requests.push_back(MPI_REQUEST_NULL);
    if (send)
      MPI_CHECK(MPI_Isend(data + off, count, type, peer, tag, comm_, &requests.back()));
    else
      MPI_CHECK(MPI_Irecv(data + off, count, type, peer, tag, comm_, &requests.back()));
  });
  return CommHandle{id};
}

CommHandle MpiCommunicator::send_start(const float* data, size_t n, int peer, int tag) {
  return point_start(true, const_cast<float*>(data), n, MPI_FLOAT, peer, tag);
}

CommHandle MpiCommunicator::recv_start(float* data, size_t n, int peer, int tag) {
  return point_start(false, data, n, MPI_FLOAT, peer, tag);
}

CommHandle MpiCommunicator::send_start(const uint16_t* data, size_t n, int peer, int tag) {
  return point_start(true, const_cast<uint16_t*>(data), n, MPI_UINT16_T, peer, tag);
}

CommHandle MpiCommunicator::recv_start(uint16_t* data, size_t n, int peer, int tag) {
  return point_start(false, data, n, MPI_UINT16_T, peer, tag);
}

int MpiCommunicator::checked_count(size_t count, const char* op) const {
  if (count > max_count_)
    MPITRAIN_THROW(std::string(op) + ": a count of " + std::to_string(count) +
                   " exceeds what one MPI call takes (" + std::to_string(max_count_) +
                   "); this call is not split: pass smaller pieces");
  return static_cast<int>(count);
}

size_t MpiCommunicator::checked_blocks(std::span<const size_t> counts, const char* op) const {
  if (counts.size() != static_cast<size_t>(size_))
    MPITRAIN_THROW(std::string(op) + ": " + std::to_string(counts.size()) + " counts for " +
                   std::to_string(size_) + " ranks");
  size_t total = 0;
  for (size_t count : counts) {
    checked_count(count, op);
    total += count;
    checked_count(total, op);  // offsets, and the whole: implementations sum the counts in an int
  }
  return total;
}

void MpiCommunicator::set_blocks(Slot& slot, std::span<const size_t> counts) {
  set_blocks(slot.counts, slot.displs, counts);
}

void MpiCommunicator::set_blocks(std::vector<int>& ints, std::vector<int>& displs,
                                 std::span<const size_t> counts) {
  ints.resize(size_);
  displs.resize(size_);
  int offset = 0;
  for (int r = 0; r < size_; ++r) {
    ints[r] = static_cast<int>(counts[r]);
    displs[r] = offset;
    offset += ints[r];
  }
}

CommHandle MpiCommunicator::all_to_all_start(const void* in, void* out, size_t bytes) {
  const int count = checked_count(bytes, "all_to_all_start");
  const int id = acquire_slot("all_to_all", size_ * bytes);
  count_sent(all_to_all_bus_bytes(bytes, size_));
  std::vector<MPI_Request>& requests = slots_[id].requests;
  requests.push_back(MPI_REQUEST_NULL);
  MPI_CHECK(MPI_Ialltoall(in, count, MPI_BYTE, out, count, MPI_BYTE, comm_, &requests.back()));
  return CommHandle{id};
}

CommHandle MpiCommunicator::all_gather_start(const void* in, void* out, size_t bytes) {
  const int count = checked_count(bytes, "all_gather_start");
  const int id = acquire_slot("all_gather", size_ * bytes);
  count_sent(blocks_bus_bytes(size_ * bytes, bytes, size_));
  std::vector<MPI_Request>& requests = slots_[id].requests;
  requests.push_back(MPI_REQUEST_NULL);
  MPI_CHECK(MPI_Iallgather(in, count, MPI_BYTE, out, count, MPI_BYTE, comm_, &requests.back()));
  return CommHandle{id};
}

CommHandle MpiCommunicator::all_to_allv_start(const void* in, std::span<const size_t> send,
                                              void* out, std::span<const size_t> recv) {
  const size_t sent = checked_blocks(send, "all_to_allv_start");
  const size_t received = checked_blocks(recv, "all_to_allv_start");
  const int id = acquire_slot("all_to_allv", sent + received);
  count_sent(blocks_bus_bytes(sent, send[rank_], size_));  // all but its own block
  Slot& slot = slots_[id];
  set_blocks(slot.counts, slot.displs, send);
  set_blocks(slot.recv_counts, slot.recv_displs, recv);
  slot.requests.push_back(MPI_REQUEST_NULL);
  MPI_CHECK(MPI_Ialltoallv(in, slot.counts.data(), slot.displs.data(), MPI_BYTE, out,
                           slot.recv_counts.data(), slot.recv_displs.data(), MPI_BYTE, comm_,
                           &slot.requests.back()));
  return CommHandle{id};
}

CommHandle MpiCommunicator::reduce_scatter_start(float* data, std::span<const size_t> counts,
                                                 ReduceOp op) {
  const size_t total = checked_blocks(counts, "reduce_scatter_start");
  const int id = acquire_slot("reduce_scatter", total * sizeof(float));
  count_sent(blocks_bus_bytes(total * sizeof(float), counts[rank_] * sizeof(float), size_));
  // One in-place reduce per block onto its owner, all in flight together: the result lands at
  // the block's own offset, so no copy moves it there afterwards (MPI_Ireduce_scatter's in-place
  // form leaves it at data[0]), and the same calls serve device pointers under a CUDA-aware MPI.
  std::vector<MPI_Request>& requests = slots_[id].requests;
  size_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    const int count = static_cast<int>(counts[r]);
    float* block = data + offset;
    offset += counts[r];
    if (count == 0) continue;
    requests.push_back(MPI_REQUEST_NULL);
    MPI_CHECK(MPI_Ireduce(r == rank_ ? MPI_IN_PLACE : block, block, count, MPI_FLOAT, mpi_op(op), r,
                          comm_, &requests.back()));
  }
  return CommHandle{id};
}

template <typename E>
CommHandle MpiCommunicator::gather_blocks_start(E* data, std::span<const size_t> counts,
                                                MPI_Datatype type) {
  const size_t total = checked_blocks(counts, "all_gather_start");
  const int id = acquire_slot("all_gather", total * sizeof(E));
  count_sent(blocks_bus_bytes(total * sizeof(E), counts[rank_] * sizeof(E), size_));
  Slot& slot = slots_[id];
  set_blocks(slot, counts);
  slot.requests.push_back(MPI_REQUEST_NULL);
  MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, slot.counts.data(),
                            slot.displs.data(), type, comm_, &slot.requests.back()));
  return CommHandle{id};
}

CommHandle MpiCommunicator::all_gather_start(float* data, std::span<const size_t> counts) {
  return gather_blocks_start(data, counts, MPI_FLOAT);
}

CommHandle MpiCommunicator::all_gather_start(uint16_t* data, std::span<const size_t> counts) {
  return gather_blocks_start(data, counts, MPI_UINT16_T);
}

void MpiCommunicator::wait(CommHandle handle) {
  Slot& slot = slots_.pending(handle.id);
  BlockedTimer timer(blocked_seconds_, calls_, slot.call);
  MPI_CHECK(MPI_Waitall(static_cast<int>(slot.requests.size()), slot.requests.data(),
                        MPI_STATUSES_IGNORE));
  slot.requests.clear();
  slots_.release(handle.id);
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
