// CUDA backend: causal self-attention. `probs` holds each score row's log-sum-exp (B,NH,T), fp32,
// in both paths; cuDNN's is that of the bf16/fp16 copies, so the CUDA kernels' backward (also when
// only cuDNN's backward is unavailable) recomputes it in fp32 beside D instead of reading it:
// statistics and recomputation always come from the same inputs and arithmetic.
//   cudnn kernel set with bf16/fp16 GEMM math: cuDNN's fused flash attention on bf16/fp16 copies
//     of qkv (and of dout), outputs converted back to fp32. Backward needs the forward output,
//     which the Backend interface does not pass: the forward graph runs again to recompute it.
//   otherwise (fp32/tf32 math, the cuda kernel set, or no cuDNN engine): the flash-style CUDA
//     kernels in fp32; backward first recomputes D = rowsum(dout * out) into `scratch` and the
//     log-sum-exp into the workspace.
#include "context.hpp"
#include "kernels.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda_backend.hpp"

namespace mpitrain {

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
void CudaBackend<T>::attention_forward(T* out, T* probs, const T* qkv, int B, int Tlen, int NH,
                                       int NKV, int hs) {
  cuda::Context& c = *ctx_;
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
  cuda::launch_attention_forward(out, probs, nullptr, nullptr, qkv, B, Tlen, NH, NKV, hs, c.stream);
}

template <typename T>
void CudaBackend<T>::attention_backward(T* dqkv, T* scratch, const T* dout, const T* qkv,
                                        const T* probs, int B, int Tlen, int NH, int NKV, int hs) {
  cuda::Context& c = *ctx_;
  cuda::SdpaShape s{};
  if (cudnn_attention(c, B, Tlen, NH, NKV, hs, s)) {
    const size_t N = size_t(B) * Tlen, QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs;
    Scratch::Frame f(c.scratch);
    uint16_t* qkv16 = f.take<uint16_t>(N * QKV, "attention qkv copy");
    uint16_t* o16 = f.take<uint16_t>(N * A, "attention output copy");
    uint16_t* do16 = f.take<uint16_t>(N * A, "attention output gradient copy");
    uint16_t* dqkv16 = f.take<uint16_t>(N * QKV, "attention qkv gradient copy");
    float* stats = f.take<float>(size_t(B) * NH * Tlen, "attention statistics (recomputed)");
    cuda::launch_cast_down(qkv16, qkv, N, QKV, QKV, s.io, c.stream);
    cuda::launch_cast_down(do16, dout, N, A, A, s.io, c.stream);
    if (c.cudnn->sdpa_forward(s, o16, stats, qkv16, c.scratch) &&
        c.cudnn->sdpa_backward(s, dqkv16, qkv16, o16, do16, probs, c.scratch)) {
      cuda::launch_cast_up(dqkv, dqkv16, N * QKV, s.io, c.stream);
      return;
    }
    fallback(c, s);
  }
  // D = rowsum(dout * out) and the log-sum-exp, with out recomputed, then the gradients
  Scratch::Frame f(c.scratch);
  float* lse = f.take<float>(size_t(B) * NH * Tlen, "attention statistics (fp32, recomputed)");
  cuda::launch_attention_forward(nullptr, lse, scratch, dout, qkv, B, Tlen, NH, NKV, hs, c.stream);
  cuda::launch_attention_backward(dqkv, dout, qkv, lse, scratch, B, Tlen, NH, NKV, hs, c.stream);
}

template void CudaBackend<float>::attention_forward(float*, float*, const float*, int, int, int,
                                                    int, int);
template void CudaBackend<float>::attention_backward(float*, float*, const float*, const float*,
                                                     const float*, int, int, int, int, int);

}  // namespace mpitrain
