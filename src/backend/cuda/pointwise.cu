// CUDA kernels: elementwise ops (residual add, GELU, SwiGLU, scale, rounding and casts).
// Grid-stride loops; the maths is the CPU backend's, term for term (cpu_memory_and_pointwise.cpp).
#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluK1 = 0.044715f;

#define GRID_STRIDE(i, n)                                                 \
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < (n); \
       i += size_t{gridDim.x} * blockDim.x)

__global__ void add_kernel(Out out, In a, In b, size_t n) {
  GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

__global__ void accumulate_kernel(Out y, In x, size_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }

__global__ void scale_kernel(float* x, float a, size_t n) { GRID_STRIDE(i, n) x[i] *= a; }

// out = x / (1 + e^-2u), u = k0 (x + k1 x^3)   (0.5 (1 + tanh u) = sigmoid(2u))
__global__ void gelu_forward_kernel(Out out, In inp, size_t n) {
  GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluK0 * (x + kGeluK1 * x * x * x);
    out[i] = x / (1.0f + expf(-2.0f * u));
  }
}

// dinp = dout (s + x 2u' s (1 - s)), 1 - s = e s
__global__ void gelu_backward_kernel(Out dinp, In inp, In dout, size_t n) {
  GRID_STRIDE(i, n) {
    const float x = inp[i];
    const float u = kGeluK0 * (x + kGeluK1 * x * x * x);
    const float du = kGeluK0 * (1.0f + 3.0f * kGeluK1 * x * x);
    const float e = expf(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    dinp[i] = dout[i] * (s + x * 2.0f * du * s * (e * s));
  }
}

// out(N,F) = silu(gate) up on rows [gate (F) | up (F)]
__global__ void swiglu_forward_kernel(Out out, In inp, int N, int F) {
  GRID_STRIDE(i, size_t(N) * F) {
    const size_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f];
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

__global__ void swiglu_backward_kernel(Out dinp, In inp, In dout, int N, int F) {
  GRID_STRIDE(i, size_t(N) * F) {
    const size_t n = i / F, f = i % F;
    const float g = inp[n * 2 * F + f], u = inp[n * 2 * F + F + f], d = dout[i];
    const float e = expf(-g);
    const float s = 1.0f / (1.0f + e);
    dinp[n * 2 * F + f] = d * u * s * (1.0f + g * (e * s));
    dinp[n * 2 * F + F + f] = d * g * s;
  }
}

__global__ void round_kernel(float* x, size_t n, Precision p) {
  GRID_STRIDE(i, n) x[i] = round_to_device(x[i], p);
}

__global__ void convert_kernel(Out dst, In src, size_t rows, size_t cols, size_t ld) {
  GRID_STRIDE(i, rows * cols) dst[i] = src[(i / cols) * ld + i % cols];
}

#undef GRID_STRIDE

}  // namespace

void launch_add(Out out, In a, In b, size_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(out, a, b, n);
  CUDA_CHECK_LAUNCH();
}

void launch_accumulate(Out y, In x, size_t n, cudaStream_t s) {
  if (n == 0) return;
  accumulate_kernel<<<grid_for(n), kThreads, 0, s>>>(y, x, n);
  CUDA_CHECK_LAUNCH();
}

void launch_scale(float* x, float a, size_t n, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(x, a, n);
  CUDA_CHECK_LAUNCH();
}

void launch_gelu_forward(Out out, In inp, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(out, inp, n);
  CUDA_CHECK_LAUNCH();
}

void launch_gelu_backward(Out dinp, In inp, In dout, size_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(dinp, inp, dout, n);
  CUDA_CHECK_LAUNCH();
}

void launch_swiglu_forward(Out out, In inp, int N, int F, cudaStream_t s) {
  const size_t n = size_t(N) * F;
  if (n == 0) return;
  swiglu_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(out, inp, N, F);
  CUDA_CHECK_LAUNCH();
}

void launch_swiglu_backward(Out dinp, In inp, In dout, int N, int F, cudaStream_t s) {
  const size_t n = size_t(N) * F;
  if (n == 0) return;
  swiglu_backward_kernel<<<grid_for(n), kThreads, 0, s>>>(dinp, inp, dout, N, F);
  CUDA_CHECK_LAUNCH();
}

void launch_round(float* x, size_t n, Precision p, cudaStream_t s) {
  if (n == 0 || p == Precision::Fp32) return;
  round_kernel<<<grid_for(n), kThreads, 0, s>>>(x, n, p);
  CUDA_CHECK_LAUNCH();
}

void launch_convert(Out dst, In src, size_t rows, size_t cols, size_t ld, cudaStream_t s) {
  if (rows * cols == 0) return;
  convert_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(dst, src, rows, cols, ld);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
