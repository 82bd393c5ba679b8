#include "mpitrain/comm/cuda_aware_communicator.hpp"

namespace mpitrain {

void CudaAwareMpiCommunicator::all_reduce(float* data, size_t n, ReduceOp op) {
  sync().all_reduce(data, n, op);
}

void CudaAwareMpiCommunicator::all_reduce(double* data, size_t n, ReduceOp op) {
  sync().all_reduce(data, n, op);
}

void CudaAwareMpiCommunicator::all_reduce(int64_t* data, size_t n, ReduceOp op) {
  sync().all_reduce(data, n, op);
}

void CudaAwareMpiCommunicator::all_reduce(uint16_t* data, size_t n, Precision dtype, ReduceOp op) {
  sync().all_reduce(data, n, dtype, op);
}

void CudaAwareMpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  sync().broadcast(data, bytes, root);
}

void CudaAwareMpiCommunicator::all_gather(const float* in, float* out, size_t n) {
  sync().all_gather(in, out, n);
}

void CudaAwareMpiCommunicator::reduce_scatter(const float* in, float* out, size_t n, ReduceOp op) {
  sync().reduce_scatter(in, out, n, op);
}

void CudaAwareMpiCommunicator::all_gather(const uint16_t* in, uint16_t* out, size_t n) {
  sync().all_gather(in, out, n);
}

void CudaAwareMpiCommunicator::reduce_scatter(const uint16_t* in, uint16_t* out, size_t n,
                                              Precision dtype, ReduceOp op) {
  sync().reduce_scatter(in, out, n, dtype, op);
}

// The started collectives: staged (see the header), the staged communicator waits for the
// compute stream itself.
CommHandle CudaAwareMpiCommunicator::all_reduce_start(float* data, size_t n, ReduceOp op) {
  return from_staged(staged_.all_reduce_start(data, n, op));
}

CommHandle CudaAwareMpiCommunicator::send_start(const float* data, size_t n, int peer, int tag) {
  return sync().send_start(data, n, peer, tag);
}

// The receive writes the buffer: the kernels still reading it must be done too.
CommHandle CudaAwareMpiCommunicator::recv_start(float* data, size_t n, int peer, int tag) {
  return sync().recv_start(data, n, peer, tag);
}

CommHandle CudaAwareMpiCommunicator::send_start(const uint16_t* data, size_t n, int peer, int tag) {
  return sync().send_start(data, n, peer, tag);
}

CommHandle CudaAwareMpiCommunicator::recv_start(uint16_t* data, size_t n, int peer, int tag) {
  return sync().recv_start(data, n, peer, tag);
}

CommHandle CudaAwareMpiCommunicator::all_to_all_start(const void* in, void* out, size_t bytes) {
  return from_staged(staged_.all_to_all_start(in, out, bytes));
}

CommHandle CudaAwareMpiCommunicator::all_gather_start(const void* in, void* out, size_t bytes) {
  return from_staged(staged_.all_gather_start(in, out, bytes));
}

CommHandle CudaAwareMpiCommunicator::all_to_allv_start(const void* in,
                                                       std::span<const size_t> send, void* out,
                                                       std::span<const size_t> recv) {
  return from_staged(staged_.all_to_allv_start(in, send, out, recv));
}

CommHandle CudaAwareMpiCommunicator::reduce_scatter_start(float* data,
                                                          std::span<const size_t> counts,
                                                          ReduceOp op) {
  return from_staged(staged_.reduce_scatter_start(data, counts, op));
}

CommHandle CudaAwareMpiCommunicator::all_gather_start(float* data,
                                                      std::span<const size_t> counts) {
  return from_staged(staged_.all_gather_start(data, counts));
}

CommHandle CudaAwareMpiCommunicator::all_gather_start(uint16_t* data,
                                                      std::span<const size_t> counts) {
  return from_staged(staged_.all_gather_start(data, counts));
}

void CudaAwareMpiCommunicator::wait(CommHandle handle) {
  if (handle.id >= kStaged) staged_.wait({handle.id - kStaged});
  else mpi_.wait(handle);
}

}  // namespace mpitrain
