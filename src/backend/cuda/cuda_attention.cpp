// CUDA backend: causal self-attention. `probs` holds each score row's log-sum-exp (B,NH,T), fp32,
// written by the forward that ran; backward reads it and forward's output `out` (the Backend
// interface passes it) and recomputes nothing of the forward.
//   cudnn kernel set with bf16/fp16 GEMM math: cuDNN's fused flash attention on bf16/fp16 copies
//     of qkv (and of out and dout in backward), outputs converted back to fp32 (out is forward's
//     output widened, so its copy holds forward's bits again).
//   otherwise (fp32/tf32 math, the cuda kernel set, or no cuDNN engine): the flash-style CUDA
//     kernels in fp32; backward first computes D = rowsum(dout * out) into `scratch`.
// Where cuDNN has an engine for one direction only, the other reads what it saved: under
// --precision bf16|fp16 qkv is already rounded, so both saw the same values and their statistics
// differ by fp32 rounding (the order of the sums) only.
#include "context.hpp"
#include "fp32_tensors.hpp"
#include "kernels.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda_backend.hpp"

namespace mpitrain {

using cuda::fp32;
using cuda::Scratch;

namespace {

// The cuDNN shape for this call, or nothing when the cuDNN path does not apply.
bool cudnn_attention(const cuda::Context& c, int B, int Tlen, int NH, int NKV, int hs,
                     cuda::SdpaShape& s) {
  if (!c.cudnn) return false;
  const GemmMath m = c.options.math;
  if (m != GemmMath::Bf16 && m != GemmMath::Fp16) return false;
  s = cuda::SdpaShape{B,   Tlen, NH,
                      NKV, hs,   m == GemmMath::Bf16 ? Precision::Bf16 : Precision::Fp16};
  return cuda::sdpa_shape_supported(s);
}

void fallback(cuda::Context& c, const cuda::SdpaShape& s) {
  c.report_fallback("cuDNN attention unavailable for B=" + std::to_string(s.B) +
                    " T=" + std::to_string(s.T) + " NH=" + std::to_string(s.NH) +
                    " NKV=" + std::to_string(s.NKV) + " hs=" + std::to_string(s.hs) +
                    "; using the CUDA attention kernel");
}

}  // namespace

template <typename T>
void CudaBackend<T>::attention_forward(Buf<T> out_buf, T* probs, CBuf<T> qkv_buf, int B, int Tlen,
                                       int NH, int NKV, int hs) {
  cuda::Context& c = *ctx_;
  T* out = fp32(out_buf);
  const T* qkv = fp32(qkv_buf);
  cuda::SdpaShape s{};
  if (cudnn_attention(c, B, Tlen, NH, NKV, hs, s)) {
    const size_t N = size_t(B) * Tlen, QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs;
    Scratch::Frame f(c.scratch);
    uint16_t* qkv16 = f.take<uint16_t>(N * QKV, "attention qkv copy");
    uint16_t* o16 = f.take<uint16_t>(N * A, "attention output copy");
    cuda::launch_cast_down(qkv16, qkv, N, QKV, QKV, s.io, c.stream);
    if (c.cudnn->sdpa_forward(s, o16, probs, qkv16, c.scratch)) {
      cuda::launch_cast_up(out, o16, N * A, s.io, c.stream);
      return;
    }
    fallback(c, s);
  }
  cuda::launch_attention_forward(out, probs, qkv, B, Tlen, NH, NKV, hs, c.stream);
}

template <typename T>
void CudaBackend<T>::attention_backward(Buf<T> dqkv_buf, T* scratch, CBuf<T> dout_buf,
                                        CBuf<T> qkv_buf, CBuf<T> out_buf, const T* probs, int B,
                                        int Tlen, int NH, int NKV, int hs) {
  cuda::Context& c = *ctx_;
  T* dqkv = fp32(dqkv_buf);
  const T *dout = fp32(dout_buf), *qkv = fp32(qkv_buf), *out = fp32(out_buf);
  cuda::SdpaShape s{};
  if (cudnn_attention(c, B, Tlen, NH, NKV, hs, s)) {
    const size_t N = size_t(B) * Tlen, QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs;
    Scratch::Frame f(c.scratch);
    uint16_t* qkv16 = f.take<uint16_t>(N * QKV, "attention qkv copy");
    uint16_t* o16 = f.take<uint16_t>(N * A, "attention output copy");
    uint16_t* do16 = f.take<uint16_t>(N * A, "attention output gradient copy");
    uint16_t* dqkv16 = f.take<uint16_t>(N * QKV, "attention qkv gradient copy");
    cuda::launch_cast_down(qkv16, qkv, N, QKV, QKV, s.io, c.stream);
    cuda::launch_cast_down(o16, out, N, A, A, s.io, c.stream);
    cuda::launch_cast_down(do16, dout, N, A, A, s.io, c.stream);
    if (c.cudnn->sdpa_backward(s, dqkv16, qkv16, o16, do16, probs, c.scratch)) {
      cuda::launch_cast_up(dqkv, dqkv16, N * QKV, s.io, c.stream);
      return;
    }
    fallback(c, s);
  }
  cuda::launch_attention_d(scratch, dout, out, B, Tlen, NH, hs, c.stream);
  cuda::launch_attention_backward(dqkv, dout, qkv, probs, scratch, B, Tlen, NH, NKV, hs, c.stream);
}

template void CudaBackend<float>::attention_forward(Buf<float>, float*, CBuf<float>, int, int, int,
                                                    int, int);
template void CudaBackend<float>::attention_backward(Buf<float>, float*, CBuf<float>, CBuf<float>,
                                                     CBuf<float>, const float*, int, int, int, int,
                                                     int);

}  // namespace mpitrain
