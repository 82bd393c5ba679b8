// Sums over rows, per column, in a fixed order (no atomics): rows are cut into R chunks; block
// (column block, chunk) sums its chunk into partial[chunk][c]; a second pass adds the R partials
// in chunk order to the output. Used for bias, norm-weight and position-embedding gradients.
#pragma once

#include "common.cuh"

namespace mpitrain::cuda::colsum {

inline constexpr int kCols = 32, kRowLanes = 8, kMaxChunks = 1024, kMinRowsPerChunk = 64;

inline int chunks(int rows) {
  return std::clamp((rows + kMinRowsPerChunk - 1) / kMinRowsPerChunk, 1, kMaxChunks);
}

// K values per (row, column) from value(r, c, out[K]); partial is (K, R, cols).
template <int K, class Value>
__global__ void partials_kernel(float* partial, int rows, int cols, int rows_per_chunk,
                                Value value) {
  __shared__ float sh[K][kRowLanes][kCols + 1];
  const int c = blockIdx.x * kCols + threadIdx.x, chunk = blockIdx.y;
  const int r0 = chunk * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
  float acc[K];
  for (int k = 0; k < K; ++k) acc[k] = 0.0f;
  if (c < cols) {
    for (int r = r0 + threadIdx.y; r < r1; r += kRowLanes) {
      float v[K];
      value(r, c, v);
      for (int k = 0; k < K; ++k) acc[k] += v[k];
    }
  }
  for (int k = 0; k < K; ++k) sh[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0 && c < cols) {
    for (int k = 0; k < K; ++k) {
      float s = 0.0f;
      for (int y = 0; y < kRowLanes; ++y) s += sh[k][y][threadIdx.x];
      partial[(size_t(k) * gridDim.y + chunk) * cols + c] = s;
    }
  }
}

// out_k[c] += sum over chunks of partial[k][chunk][c]  (out_k null: skipped)
template <int K>
__global__ void finish_kernel(float* out0, float* out1, const float* partial, int R, int cols) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  for (int k = 0; k < K; ++k) {
    float* out = k == 0 ? out0 : out1;
    if (out == nullptr) continue;
    float s = 0.0f;
    for (int r = 0; r < R; ++r) s += partial[(size_t(k) * R + r) * cols + c];
    out[c] += s;
  }
}

template <int K, class Value>
void run(float* out0, float* out1, int rows, int cols, float* scratch, Value value,
         cudaStream_t s) {
  if (rows <= 0 || cols <= 0) return;
  const int R = chunks(rows), per = (rows + R - 1) / R;
  const dim3 grid((cols + kCols - 1) / kCols, R), block(kCols, kRowLanes);
  partials_kernel<K><<<grid, block, 0, s>>>(scratch, rows, cols, per, value);
  CUDA_CHECK_LAUNCH();
  finish_kernel<K>
      <<<(cols + kThreads - 1) / kThreads, kThreads, 0, s>>>(out0, out1, scratch, R, cols);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda::colsum
