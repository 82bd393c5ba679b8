// CUDA kernels: LayerNorm and RMSNorm over the last dim C of N rows. One warp per row for the
// forward and the input gradient; the weight/bias gradients are column sums (colsum.cuh).
// The maths is the CPU backend's (cpu_norms.cpp).
#include "colsum.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

constexpr int kRowsPerBlock = 8;  // warps per block, one row each

// mean = sum x / C; rstd = 1/sqrt(sum (x-mean)^2 / C + eps); out = (x-mean) rstd w + b
// RMS (mean == nullptr): rstd = 1/sqrt(sum x^2 / C + eps); out = x rstd w
__global__ void norm_forward_kernel(Out out, float* mean, float* rstd, In inp, In w, In b, int N,
                                    int C, float eps) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const In x = inp + size_t(n) * C;
  float m = 0.0f;
  if (mean != nullptr) {
    float s = 0.0f;
    for (int c = lane; c < C; c += 32) s += x[c];
    m = warp_sum(s) / C;
  }
  float v = 0.0f;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = 1.0f / sqrtf(warp_sum(v) / C + eps);
  const Out o = out + size_t(n) * C;
  for (int c = lane; c < C; c += 32) o[c] = (x[c] - m) * r * w[c] + (b != nullptr ? b[c] : 0.0f);
  if (lane == 0) {
    if (mean != nullptr) mean[n] = m;
    rstd[n] = r;
  }
}

// norm = (x - mean) rstd (mean 0 for RMS); dnorm = dout w
// dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm))   (no mean(dnorm) term for RMS)
__global__ void norm_backward_input_kernel(Out dinp, In dout, In inp, In w, const float* mean,
                                           const float* rstd, int N, int C) {
  const int n = blockIdx.x * kRowsPerBlock + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (n >= N) return;
  const In x = inp + size_t(n) * C;
  const In d = dout + size_t(n) * C;
  const float m = mean != nullptr ? mean[n] : 0.0f, r = rstd[n];
  float dn_sum = 0.0f, dnn_sum = 0.0f;
  for (int c = lane; c < C; c += 32) {
    const float dn = d[c] * w[c];
    dn_sum += dn;
    dnn_sum += dn * (x[c] - m) * r;
  }
  const float dn_mean = mean != nullptr ? warp_sum(dn_sum) / C : 0.0f;
  const float dnn_mean = warp_sum(dnn_sum) / C;
  const Out di = dinp + size_t(n) * C;
  for (int c = lane; c < C; c += 32)
    di[c] += r * (d[c] * w[c] - dn_mean - (x[c] - m) * r * dnn_mean);
}

// per (n, c): [dout norm, dout]
struct NormParamValue {
  In dout, inp;
  const float *mean, *rstd;
  int C;
  __device__ void operator()(int n, int c, float* v) const {
    const size_t i = size_t(n) * C + c;
    const float m = mean != nullptr ? mean[n] : 0.0f;
    v[0] = dout[i] * (inp[i] - m) * rstd[n];
    v[1] = dout[i];
  }
};

}  // namespace

void launch_layernorm_forward(Out out, float* mean, float* rstd, In inp, In w, In b, int N, int C,
                              float eps, cudaStream_t s) {
  if (N == 0) return;
  norm_forward_kernel<<<(N + kRowsPerBlock - 1) / kRowsPerBlock, 32 * kRowsPerBlock, 0, s>>>(
      out, mean, rstd, inp, w, b, N, C, eps);
  CUDA_CHECK_LAUNCH();
}

void launch_rmsnorm_forward(Out out, float* rstd, In inp, In w, int N, int C, float eps,
                            cudaStream_t s) {
  if (N == 0) return;
  norm_forward_kernel<<<(N + kRowsPerBlock - 1) / kRowsPerBlock, 32 * kRowsPerBlock, 0, s>>>(
      out, nullptr, rstd, inp, w, nullptr, N, C, eps);
  CUDA_CHECK_LAUNCH();
}

size_t norm_backward_scratch(int N, int C) {
  return 2 * static_cast<size_t>(colsum::chunks(N)) * static_cast<size_t>(C);
}

void launch_norm_backward(Out dinp, float* dw, float* db, In dout, In inp, In w, const float* mean,
                          const float* rstd, int N, int C, float* scratch, cudaStream_t s) {
  if (N == 0) return;
  norm_backward_input_kernel<<<(N + kRowsPerBlock - 1) / kRowsPerBlock, 32 * kRowsPerBlock, 0, s>>>(
      dinp, dout, inp, w, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  colsum::run<2>(dw, db, N, C, scratch, NormParamValue{dout, inp, mean, rstd, C}, s);
}

}  // namespace mpitrain::cuda
