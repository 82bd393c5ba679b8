// CUDA kernel: rotary position embedding on the q and k heads of qkv(B,T,(NH+2NKV)hs), in place.
// Pair (2i, 2i+1) at position t turns by sign * t rope.inv_freq(i, hs), times
// rope.attention_factor(); the angle, cos and sin are computed in double as the CPU backend does
// (cpu_rope.cpp), so both round the same values.
#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

constexpr int kMaxHalf = 512;  // head size <= 1024

// one block per (t, b)
__global__ void rope_kernel(Out qkv, int T, int NH, int NKV, int hs, RopeFreqs rope, int sign) {
  __shared__ float cs[kMaxHalf], sn[kMaxHalf];
  const int t = blockIdx.x, b = blockIdx.y, half = hs / 2;
  const double scale = rope.attention_factor();
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const double angle = sign * double(rope.first_position + t) * rope.inv_freq(i, hs);
    double s, c;
    sincos(angle, &s, &c);
    cs[i] = static_cast<float>(c * scale);
    sn[i] = static_cast<float>(s * scale);
  }
  __syncthreads();
  const Out row = qkv + (size_t(b) * T + t) * size_t(NH + 2 * NKV) * hs;
  const int pairs = (NH + NKV) * half;  // q heads then k heads are contiguous
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int h = p / half, i = p % half;
    const Out x = row + size_t(h) * hs + 2 * i;
    const float x0 = x[0], x1 = x[1];
    x[0] = x0 * cs[i] - x1 * sn[i];
    x[1] = x0 * sn[i] + x1 * cs[i];
  }
}

}  // namespace

void launch_rope(Out qkv, int B, int T, int NH, int NKV, int hs, const RopeFreqs& rope, int sign,
                 cudaStream_t s) {
  if (hs % 2 != 0 || hs > 2 * kMaxHalf)
    MPITRAIN_THROW("rope: head size must be even and at most " + std::to_string(2 * kMaxHalf));
  if (B == 0 || T == 0) return;
  rope_kernel<<<dim3(T, B), 128, 0, s>>>(qkv, T, NH, NKV, hs, rope, sign);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
