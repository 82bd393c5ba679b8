#include <algorithm>
#include <climits>

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

// MPI counts are int: large buffers go in INT_MAX-element pieces.
template <typename E>
void all_reduce_chunked(MPI_Comm comm, E* data, size_t n, MPI_Datatype type, MPI_Op op) {
  constexpr size_t kMax = INT_MAX;
  for (size_t done = 0; done < n; done += kMax) {
    int count = static_cast<int>(std::min(kMax, n - done));
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done, count, type, op, comm));
  }
}

}  // namespace

void MpiCommunicator::all_reduce(float* data, size_t n, ReduceOp op) {
  all_reduce_chunked(comm_.get(), data, n, MPI_FLOAT, mpi_op(op));
}

void MpiCommunicator::all_reduce(double* data, size_t n, ReduceOp op) {
  all_reduce_chunked(comm_.get(), data, n, MPI_DOUBLE, mpi_op(op));
}

void MpiCommunicator::all_reduce(int64_t* data, size_t n, ReduceOp op) {
  all_reduce_chunked(comm_.get(), data, n, MPI_INT64_T, mpi_op(op));
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  constexpr size_t kMax = INT_MAX;
  auto* p = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kMax) {
    int count = static_cast<int>(std::min(kMax, bytes - done));
    MPI_CHECK(MPI_Bcast(p + done, count, MPI_BYTE, root, comm_.get()));
  }
}

void MpiCommunicator::barrier() { MPI_CHECK(MPI_Barrier(comm_.get())); }

}  // namespace mpitrain
