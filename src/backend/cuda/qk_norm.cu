// CUDA kernels: per-head q/k RMSNorm (qk_norm) on qkv(N,(NH+2NKV)hs). One warp per (row, head)
// for the forward and the input gradient; the weight gradients are column sums (colsum.cuh) over
// rows of each row's heads, taken before the input gradient overwrites dqkv in place. The maths
// is the CPU backend's (cpu_qk_norm.cpp).
#include "colsum.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

constexpr int kWarpsPerBlock = 8;  // one (row, head) each

unsigned blocks_for(size_t items) {
  return static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// q/k heads: rstd = 1/sqrt(sum x^2 / hs + eps); out = x rstd w. v heads: copied.
__global__ void qk_norm_forward_kernel(Out out, float* rstd, In inp, In wq, In wk, int N, int NH,
                                       int NKV, int hs, float eps) {
  const int heads = NH + 2 * NKV, normed = NH + NKV;
  const size_t item = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= size_t(N) * heads) return;
  const int n = static_cast<int>(item / heads), h = static_cast<int>(item % heads);
  const size_t at = size_t(n) * heads * hs + size_t(h) * hs;
  const In x = inp + at;
  const Out o = out + at;
  if (h >= normed) {
    for (int c = lane; c < hs; c += 32) o[c] = x[c];
    return;
  }
  const In w = h < NH ? wq : wk;
  float ss = 0.0f;
  for (int c = lane; c < hs; c += 32) ss += x[c] * x[c];
  const float r = 1.0f / sqrtf(warp_sum(ss) / hs + eps);
  for (int c = lane; c < hs; c += 32) o[c] = x[c] * r * w[c];
  if (lane == 0) rstd[size_t(n) * normed + h] = r;
}

// in place: d = rstd (d w - norm mean(d w norm)), norm = x rstd
__global__ void qk_norm_backward_input_kernel(Out d, In inp, In wq, In wk, const float* rstd,
                                              int N, int NH, int NKV, int hs) {
  const int normed = NH + NKV;
  const size_t item = size_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (item >= size_t(N) * normed) return;
  const int n = static_cast<int>(item / normed), h = static_cast<int>(item % normed);
  const size_t at = size_t(n) * (NH + 2 * NKV) * hs + size_t(h) * hs;
  const In x = inp + at;
  const In w = h < NH ? wq : wk;
  const float r = rstd[item];
  float dnn = 0.0f;
  for (int c = lane; c < hs; c += 32) dnn += d[at + c] * w[c] * x[c] * r;
  const float dnn_mean = warp_sum(dnn) / hs;  // every lane has read its d before any writes
  for (int c = lane; c < hs; c += 32) d[at + c] = r * (d[at + c] * w[c] - x[c] * r * dnn_mean);
}

// per (row n, column c): [sum over q heads of d norm, sum over k heads of d norm]
struct QkNormParamValue {
  In d, inp;
  const float* rstd;
  int NH, NKV, hs;
  __device__ void operator()(int n, int c, float* v) const {
    const size_t row = size_t(n) * (NH + 2 * NKV) * hs;
    v[0] = v[1] = 0.0f;
    for (int h = 0; h < NH + NKV; ++h) {
      const size_t i = row + size_t(h) * hs + c;
      v[h < NH ? 0 : 1] += d[i] * inp[i] * rstd[size_t(n) * (NH + NKV) + h];
    }
  }
};

}  // namespace

void launch_qk_norm_forward(Out out, float* rstd, In inp, In wq, In wk, int N, int NH, int NKV,
                            int hs, float eps, cudaStream_t s) {
  const size_t items = size_t(N) * (NH + 2 * NKV);
  if (items == 0) return;
  qk_norm_forward_kernel<<<blocks_for(items), 32 * kWarpsPerBlock, 0, s>>>(
      out, rstd, inp, wq, wk, N, NH, NKV, hs, eps);
  CUDA_CHECK_LAUNCH();
}

size_t qk_norm_backward_scratch(int N, int hs) {
  return 2 * static_cast<size_t>(colsum::chunks(N)) * static_cast<size_t>(hs);
}

void launch_qk_norm_backward(Out dqkv, float* dwq, float* dwk, In inp, In wq, In wk,
                             const float* rstd, int N, int NH, int NKV, int hs, float* scratch,
                             cudaStream_t s) {
  const size_t items = size_t(N) * (NH + NKV);
  if (items == 0) return;
  colsum::run<2>(dwq, dwk, N, hs, scratch, QkNormParamValue{dqkv, inp, rstd, NH, NKV, hs}, s);
  qk_norm_backward_input_kernel<<<blocks_for(items), 32 * kWarpsPerBlock, 0, s>>>(
      dqkv, inp, wq, wk, rstd, N, NH, NKV, hs);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
