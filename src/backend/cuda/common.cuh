// Device helpers shared by the backend's kernels: reductions, rounding, launch shapes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>

#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain::cuda {

inline constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (enough to fill any current GPU).
inline unsigned grid_for(size_t n, int threads = kThreads) {
  const size_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(std::clamp<size_t>(blocks, 1, 65536));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum / max over the block (blockDim.x a multiple of 32, <= 1024); every thread gets the result.
// `shared` holds 32 values; the same order every run.
template <typename V>
__device__ V block_sum(V v, V* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : V(0);
  return warp_sum(v);
}
__device__ inline float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

// x rounded to the nearest value of precision p (ties to even; fp16 overflows to inf).
__device__ __forceinline__ float round_to_device(float x, Precision p) {
  if (p == Precision::Bf16) return __bfloat162float(__float2bfloat16_rn(x));
  if (p == Precision::Fp16) return __half2float(__float2half_rn(x));
  return x;
}

}  // namespace mpitrain::cuda
