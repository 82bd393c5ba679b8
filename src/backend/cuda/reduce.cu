// CUDA kernels: column sums and the fixed-order sum of doubles.
#include "colsum.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

struct PlainValue {
  In x;
  int cols;
  __device__ void operator()(int r, int c, float* v) const { v[0] = x[size_t(r) * cols + c]; }
};

// One block: thread i sums x[i], x[i + 1024], ... then a tree over the block.
__global__ void sum_doubles_kernel(double* out, const double* x, size_t n) {
  __shared__ double sh[32];
  double s = 0.0;
  for (size_t i = threadIdx.x; i < n; i += blockDim.x) s += x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

size_t colsum_scratch(int rows, int cols) {
  return static_cast<size_t>(colsum::chunks(rows)) * static_cast<size_t>(cols);
}

void launch_colsum_accumulate(float* out, In x, int rows, int cols, float* scratch,
                              cudaStream_t s) {
  colsum::run<1>(out, nullptr, rows, cols, scratch, PlainValue{x, cols}, s);
}

void launch_sum_doubles(double* out, const double* x, size_t n, cudaStream_t s) {
  sum_doubles_kernel<<<1, 1024, 0, s>>>(out, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
