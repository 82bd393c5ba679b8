// CUDA backend: causal self-attention. `probs` holds each score row's log-sum-exp (B,NH,T), fp32,
// written by the forward that ran; backward reads it and forward's output `out` (the Backend
// interface passes it) and recomputes nothing of the forward.
//   cudnn kernel set with bf16/fp16 GEMM math: cuDNN's fused flash attention reading and writing
//     qkv, out, dout, dqkv in place when they are stored in that type (the 2-byte path), else on
//     bf16/fp16 copies converted back to fp32 (the emulated path: out is forward's output
//     widened, so its copy holds forward's bits again).
//   otherwise (fp32/tf32 math, the cuda kernel set, or no cuDNN engine): the flash-style CUDA
//     kernels computing in fp32 on tensors of any storage type; backward first computes
//     D = rowsum(dout * out) into `scratch`, and sums a 2-byte dqkv in fp32 workspace first.
// A sliding window shorter than the sequence (Mistral's) or document masking: the CUDA kernels,
// whatever the kernel set; our cuDNN graphs have neither a band mask nor per-row document bounds
// yet (said once on stderr). Document starts and block positions come in host memory and are
// copied to the scratch frame before the kernel (stream-ordered).
// Context parallelism's block API (attention_block_forward / _row_dot / _block_backward): the
// same CUDA kernels, by position, in every configuration (fp32 accumulators, q, k, v read in
// their storage type); row_dot is the whole-sequence backward's D kernel.
// Where cuDNN has an engine for one direction only, the other reads what it saved: under
// --precision bf16|fp16 qkv is already rounded, so both saw the same values and their statistics
// differ by fp32 rounding (the order of the sums) only.
#include "context.hpp"
#include "kernels.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda_backend.hpp"

namespace mpitrain {

using cuda::In;
using cuda::Out;
using cuda::Scratch;

namespace {

// The cuDNN shape for this call, or nothing when the cuDNN path does not apply.
bool cudnn_attention(cuda::Context& c, int B, int Tlen, int NH, int NKV, int hs,
                     const AttentionMask& mask, cuda::SdpaShape& s) {
  if (!c.cudnn) return false;
  const GemmMath m = c.options.math;
  if (m != GemmMath::Bf16 && m != GemmMath::Fp16) return false;
  if (mask.window > 0 && mask.window < Tlen) {
    c.report_fallback("cuDNN attention: no sliding-window graph (window " +
                      std::to_string(mask.window) + " < T=" + std::to_string(Tlen) +
                      "); using the CUDA attention kernel");
    return false;
  }
  if (mask.doc_starts) {
    c.report_fallback("cuDNN attention: no document-mask graph; using the CUDA attention kernel");
    return false;
  }
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

// n elements of x in the io type: in place when stored so, else a copy in the frame.
const void* as_io(Scratch::Frame& f, cuda::Context& c, In x, Precision io, size_t n,
                  const char* what) {
  if (x.dtype() == io) return x.data();
  const Out copy(f.bytes(n * 2, what), io);
  cuda::launch_convert(copy, x, 1, n, n, c.stream);
  return copy.data();
}

// Where cuDNN writes an io-type result for dst: dst itself, or a frame buffer that
// finish_io converts into dst afterwards.
void* io_target(Scratch::Frame& f, Out dst, Precision io, size_t n, const char* what) {
  return dst.dtype() == io ? dst.data() : f.bytes(n * 2, what);
}
void finish_io(cuda::Context& c, Out dst, const void* written, Precision io, size_t n) {
  if (written != dst.data()) cuda::launch_convert(dst, In(written, io), 1, n, n, c.stream);
}

// n positions (block positions, document starts) from host memory into the frame
// (stream-ordered: the kernel after reads them), or null for null.
const int* device_positions(Scratch::Frame& f, cuda::Context& c, const int* host, size_t n) {
  if (!host || n == 0) return nullptr;
  int* d = f.take<int>(n, "attention positions");
  CUDA_CHECK(cudaMemcpyAsync(d, host, sizeof(int) * n, cudaMemcpyHostToDevice, c.stream));
  return d;
}

}  // namespace

template <typename T>
void CudaBackend<T>::attention_forward(Buf<T> out, T* probs, CBuf<T> qkv, int B, int Tlen, int NH,
                                       int NKV, int hs, T scale, const AttentionMask& mask) {
  cuda::Context& c = *ctx_;
  cuda::SdpaShape s{};
  if (cudnn_attention(c, B, Tlen, NH, NKV, hs, mask, s)) {
    const size_t N = size_t(B) * Tlen, QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs;
    Scratch::Frame f(c.scratch);
    const void* qkv16 = as_io(f, c, qkv, s.io, N * QKV, "attention qkv copy");
    void* o16 = io_target(f, out, s.io, N * A, "attention output copy");
    if (c.cudnn->sdpa_forward(s, scale, o16, probs, qkv16, c.scratch)) {
      finish_io(c, out, o16, s.io, N * A);
      return;
    }
    fallback(c, s);
  }
  Scratch::Frame f(c.scratch);
  cuda::launch_attention_forward(out, probs, qkv, B, Tlen, NH, NKV, hs, scale, mask.window,
                                 device_positions(f, c, mask.doc_starts, size_t(B) * Tlen),
                                 c.stream);
}

template <typename T>
void CudaBackend<T>::attention_backward(Buf<T> dqkv, T* scratch, CBuf<T> dout, CBuf<T> qkv,
                                        CBuf<T> out, const T* probs, int B, int Tlen, int NH,
                                        int NKV, int hs, T scale, const AttentionMask& mask) {
  cuda::Context& c = *ctx_;
  const size_t N = size_t(B) * Tlen, QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs;
  cuda::SdpaShape s{};
  if (cudnn_attention(c, B, Tlen, NH, NKV, hs, mask, s)) {
    Scratch::Frame f(c.scratch);
    const void* qkv16 = as_io(f, c, qkv, s.io, N * QKV, "attention qkv copy");
    const void* o16 = as_io(f, c, out, s.io, N * A, "attention output copy");
    const void* do16 = as_io(f, c, dout, s.io, N * A, "attention output gradient copy");
    void* dqkv16 = io_target(f, dqkv, s.io, N * QKV, "attention qkv gradient copy");
    if (c.cudnn->sdpa_backward(s, scale, dqkv16, qkv16, o16, do16, probs, c.scratch)) {
      finish_io(c, dqkv, dqkv16, s.io, N * QKV);
      return;
    }
    fallback(c, s);
  }
  cuda::launch_attention_d(scratch, dout, out, B, Tlen, NH, hs, c.stream);
  Scratch::Frame f(c.scratch);
  const int* docs = device_positions(f, c, mask.doc_starts, N);
  if (dqkv.dtype() == Precision::Fp32)
    return cuda::launch_attention_backward(dqkv.full(), dout, qkv, probs, scratch, B, Tlen, NH, NKV,
                                           hs, scale, mask.window, docs, c.stream);
  float* sums = f.take<float>(N * QKV, "attention qkv gradient sums");
  cuda::launch_attention_backward(sums, dout, qkv, probs, scratch, B, Tlen, NH, NKV, hs, scale,
                                  mask.window, docs, c.stream);
  cuda::launch_convert(dqkv, sums, 1, N * QKV, N * QKV, c.stream);
}

template <typename T>
void CudaBackend<T>::attention_block_forward(T* out, T* lse, CBuf<T> qkv, CBuf<T> kv, int kv_ld,
                                             const int* qpos, const int* kpos, int B, int Tq,
                                             int Tk, int NH, int NKV, int hs, T scale,
                                             const AttentionMask& mask, bool merge) {
  cuda::Context& c = *ctx_;
  Scratch::Frame f(c.scratch);
  cuda::launch_attention_block_forward(
      out, lse, qkv, kv, kv_ld, device_positions(f, c, qpos, Tq), device_positions(f, c, kpos, Tk),
      B, Tq, Tk, NH, NKV, hs, scale, mask.window,
      device_positions(f, c, mask.doc_starts, size_t(B) * Tq), merge, c.stream);
}

template <typename T>
void CudaBackend<T>::attention_row_dot(T* D, CBuf<T> dout, CBuf<T> out, int B, int Tq, int NH,
                                       int hs) {
  cuda::launch_attention_d(D, dout, out, B, Tq, NH, hs, ctx_->stream);
}

template <typename T>
void CudaBackend<T>::attention_block_backward(T* dq, T* dkv, CBuf<T> dout, CBuf<T> qkv, CBuf<T> kv,
                                              int kv_ld, const T* lse, const T* D, const int* qpos,
                                              const int* kpos, int B, int Tq, int Tk, int NH,
                                              int NKV, int hs, T scale, const AttentionMask& mask) {
  cuda::Context& c = *ctx_;
  Scratch::Frame f(c.scratch);
  cuda::launch_attention_block_backward(
      dq, dkv, dout, qkv, kv, kv_ld, lse, D, device_positions(f, c, qpos, Tq),
      device_positions(f, c, kpos, Tk), B, Tq, Tk, NH, NKV, hs, scale, mask.window,
      device_positions(f, c, mask.doc_starts, size_t(B) * Tq), c.stream);
}

template void CudaBackend<float>::attention_block_forward(float*, float*, CBuf<float>, CBuf<float>,
                                                          int, const int*, const int*, int, int,
                                                          int, int, int, int, float,
                                                          const AttentionMask&, bool);
template void CudaBackend<float>::attention_row_dot(float*, CBuf<float>, CBuf<float>, int, int, int,
                                                    int);
template void CudaBackend<float>::attention_block_backward(float*, float*, CBuf<float>, CBuf<float>,
                                                           CBuf<float>, int, const float*,
                                                           const float*, const int*, const int*,
                                                           int, int, int, int, int, int, float,
                                                           const AttentionMask&);
template void CudaBackend<float>::attention_forward(Buf<float>, float*, CBuf<float>, int, int, int,
                                                    int, int, float, const AttentionMask&);
template void CudaBackend<float>::attention_backward(Buf<float>, float*, CBuf<float>, CBuf<float>,
                                                     CBuf<float>, const float*, int, int, int, int,
                                                     int, float, const AttentionMask&);

}  // namespace mpitrain
