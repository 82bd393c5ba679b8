// CUDA kernels: AdamW, SGD with momentum, LAMB's two passes, and the sum of squares (in double,
// fixed order) for the gradient norm. The maths is the CPU backend's (cpu_optimizer.cpp).
#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

constexpr int kSumBlocks = 1024;

// g = gs grad; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr (m bc1 / (sqrt(v bc2) + eps) +
// wd p)
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, size_t n,
                             float lr, float b1, float b2, float eps, float wd, float bc1,
                             float bc2, float gs) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    param[i] -= lr * (mi * bc1 / (sqrtf(vi * bc2) + eps) + wd * param[i]);
  }
}

// g = gs grad; buf = mu buf + g; p -= lr (buf + wd p)
__global__ void sgd_kernel(float* param, const float* grad, float* buf, size_t n, float lr,
                           float mu, float wd, float gs) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float b = mu * buf[i] + grad[i] * gs;
    buf[i] = b;
    param[i] -= lr * (b + wd * param[i]);
  }
}

// u = m bc1 / (sqrt(v bc2) + eps) + wd p: the AdamW / LAMB update direction
__device__ __forceinline__ float adam_direction(float m, float v, float p, float bc1, float bc2,
                                                float eps, float wd) {
  return m * bc1 / (sqrtf(v * bc2) + eps) + wd * p;
}

// LAMB first pass: m, v as AdamW; partials[block] = sum p^2, partials[gridDim + block] = sum u^2
__global__ void lamb_moments_kernel(double* partials, const float* param, const float* grad,
                                    float* m, float* v, size_t n, float b1, float b2, float eps,
                                    float wd, float bc1, float bc2, float gs) {
  __shared__ double sh[32];
  double pp = 0.0, uu = 0.0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const float g = grad[i] * gs;
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float u = adam_direction(mi, vi, param[i], bc1, bc2, eps, wd);
    pp += double(param[i]) * double(param[i]);
    uu += double(u) * double(u);
  }
  pp = block_sum(pp, sh);
  uu = block_sum(uu, sh);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = pp;
    partials[gridDim.x + blockIdx.x] = uu;
  }
}

// LAMB second pass: p -= lr u
__global__ void lamb_update_kernel(float* param, const float* m, const float* v, size_t n, float lr,
                                   float eps, float wd, float bc1, float bc2) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x)
    param[i] -= lr * adam_direction(m[i], v[i], param[i], bc1, bc2, eps, wd);
}

// partials[block] = sum of x^2 over the block's grid-stride share, in double
__global__ void sum_squares_kernel(double* partials, const float* x, size_t n) {
  __shared__ double sh[32];
  double s = 0.0;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    const double xi = x[i];
    s += xi * xi;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

}  // namespace

void launch_adamw(float* param, const float* grad, float* m, float* v, size_t n, float lr, float b1,
                  float b2, float eps, float wd, float bc1, float bc2, float grad_scale,
                  cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n), kThreads, 0, s>>>(param, grad, m, v, n, lr, b1, b2, eps, wd, bc1, bc2,
                                                grad_scale);
  CUDA_CHECK_LAUNCH();
}

void launch_sgd(float* param, const float* grad, float* buf, size_t n, float lr, float momentum,
                float wd, float grad_scale, cudaStream_t s) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n), kThreads, 0, s>>>(param, grad, buf, n, lr, momentum, wd, grad_scale);
  CUDA_CHECK_LAUNCH();
}

void launch_lamb_moments(double* partials, const float* param, const float* grad, float* m,
                         float* v, size_t n, float b1, float b2, float eps, float wd, float bc1,
                         float bc2, float grad_scale, cudaStream_t s) {
  lamb_moments_kernel<<<kSumBlocks, kThreads, 0, s>>>(partials, param, grad, m, v, n, b1, b2, eps,
                                                      wd, bc1, bc2, grad_scale);
  CUDA_CHECK_LAUNCH();
}

void launch_lamb_update(float* param, const float* m, const float* v, size_t n, float lr, float eps,
                        float wd, float bc1, float bc2, cudaStream_t s) {
  if (n == 0) return;
  lamb_update_kernel<<<grid_for(n), kThreads, 0, s>>>(param, m, v, n, lr, eps, wd, bc1, bc2);
  CUDA_CHECK_LAUNCH();
}

size_t sum_squares_partials() { return kSumBlocks; }

void launch_sum_squares(double* partials, const float* x, size_t n, cudaStream_t s) {
  sum_squares_kernel<<<kSumBlocks, kThreads, 0, s>>>(partials, x, n);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
