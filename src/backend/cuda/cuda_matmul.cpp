// CUDA backend: the linear layer. Row-major (N,IC) x (OC,IC)^T products are column-major
// cuBLASLt calls on the same memory:
//   out(N,OC) = inp W^T      ->  out^T (OC x N)  = W^T_cm(IC x OC)^T . inp^T_cm (IC x N)
//   dinp(N,IC) = dout W      ->  dinp^T (IC x N) = W_cm (IC x OC) . dout^T_cm (OC x N)
//   dW(OC,IC) += dout^T inp  ->  dW^T (IC x OC) += inp_cm (IC x N) . (dout_cm (OC x N))^T
// (X_cm: the row-major matrix X read column-major, i.e. X^T.) fp32/tf32 math runs on the fp32
// tensors; bf16/fp16 math casts the weight once and the activations in chunks of rows into the
// workspace and multiplies those copies (fp32 accumulation, fp32 output). The bias is cuBLASLt's
// epilogue; its gradient a fixed-order column sum. Where cuBLASLt has no algorithm, and for the
// `cuda` kernel set, our own GEMM kernel runs with the same operand rounding.
#include <algorithm>

#include "context.hpp"
#include "fp32_tensors.hpp"
#include "kernels.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda_backend.hpp"

namespace mpitrain {

using cuda::LtCall;
using cuda::Scratch;

namespace {

Precision operand_precision(GemmMath m) {
  if (m == GemmMath::Bf16) return Precision::Bf16;
  if (m == GemmMath::Fp16) return Precision::Fp16;
  return Precision::Fp32;
}

cublasComputeType_t compute_type(GemmMath m) {
  return m == GemmMath::Tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

bool low_precision(GemmMath m) { return m == GemmMath::Bf16 || m == GemmMath::Fp16; }

// Our kernel on rows [n0, n1) of the batch.
void own_forward(cuda::Context& c, float* out, const float* inp, const float* w, const float* bias,
                 int n0, int n1, int IC, int OC) {
  cuda::launch_gemm(out + size_t(n0) * OC, inp + size_t(n0) * IC, w, bias, n1 - n0, OC, IC, IC, 1,
                    1, IC, OC, false, operand_precision(c.options.math), c.stream);
}
void own_dinp(cuda::Context& c, float* dinp, const float* dout, const float* w, int n0, int n1,
              int IC, int OC) {
  cuda::launch_gemm(dinp + size_t(n0) * IC, dout + size_t(n0) * OC, w, nullptr, n1 - n0, IC, OC, OC,
                    1, IC, 1, IC, false, operand_precision(c.options.math), c.stream);
}
void own_dweight(cuda::Context& c, float* dw, const float* dout, const float* inp, int n0, int n1,
                 int IC, int OC) {
  cuda::launch_gemm(dw, dout + size_t(n0) * OC, inp + size_t(n0) * IC, nullptr, OC, IC, n1 - n0, 1,
                    OC, IC, 1, IC, true, operand_precision(c.options.math), c.stream);
}

void fallback(cuda::Context& c, const char* what, int N, int IC, int OC) {
  c.report_fallback(std::string("cuBLASLt has no algorithm for ") + what + " N=" +
                    std::to_string(N) + " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) +
                    " (" + to_string(c.options.math) + "); using the CUDA GEMM kernel");
}

// Rows per chunk so that `row_bytes` per row fit in what the frame has left (multiples of 128).
int chunk_rows(const Scratch::Frame& f, int N, size_t row_bytes) {
  const size_t fit = (f.available() > 2 * cuda::DeviceArena::kAlign)
                         ? (f.available() - 2 * cuda::DeviceArena::kAlign) / row_bytes
                         : 0;
  if (fit >= static_cast<size_t>(N)) return N;
  return static_cast<int>(fit / 128 * 128);
}

uint16_t* cast_rows(Scratch::Frame& f, cuda::Context& c, const float* src, int rows, int cols,
                    const char* what) {
  uint16_t* dst = f.take<uint16_t>(size_t(rows) * cols, what);
  cuda::launch_cast_down(dst, src, rows, cols, cols, operand_precision(c.options.math), c.stream);
  return dst;
}

cudaDataType_t lt_type(GemmMath m) { return m == GemmMath::Fp16 ? CUDA_R_16F : CUDA_R_16BF; }

void require_rows(int rows, const char* what) {
  if (rows == 0)
    MPITRAIN_THROW(std::string("CUDA workspace too small for one chunk of 128 rows of the ") +
                   what + " (raise the workspace size)");
}

}  // namespace

template <typename T>
void CudaBackend<T>::matmul_forward(Buf<T> out_buf, CBuf<T> inp_buf, CBuf<T> weight_buf,
                                    CBuf<T> bias_buf, int N, int IC, int OC) {
  cuda::Context& c = *ctx_;
  T* out = cuda::fp32(out_buf);
  const T *inp = cuda::fp32(inp_buf), *weight = cuda::fp32(weight_buf),
          *bias = cuda::fp32(bias_buf);
  const GemmMath math = c.options.math;
  if (N == 0) return;
  if (c.options.kernels == KernelSet::Cuda)
    return own_forward(c, out, inp, weight, bias, 0, N, IC, OC);
  if (!low_precision(math)) {
    const LtCall call{true, false, OC,  N,  IC,   CUDA_R_32F, compute_type(math), weight, IC,
                      inp,  IC,    out, OC, bias, false};
    if (!c.gemm->run(call, c.stream)) {
      fallback(c, "matmul forward", N, IC, OC);
      own_forward(c, out, inp, weight, bias, 0, N, IC, OC);
    }
    return;
  }
  Scratch::Frame f(c.scratch);
  const uint16_t* w16 = cast_rows(f, c, weight, OC, IC, "low-precision weight copy");
  const int rows = chunk_rows(f, N, size_t(IC) * 2);
  require_rows(rows, "matmul input copy");
  for (int n0 = 0; n0 < N; n0 += rows) {
    const int n1 = std::min(N, n0 + rows);
    Scratch::Frame chunk(c.scratch);
    const uint16_t* x16 = cast_rows(chunk, c, inp + size_t(n0) * IC, n1 - n0, IC, "input copy");
    const LtCall call{true,
                      false,
                      OC,
                      n1 - n0,
                      IC,
                      lt_type(math),
                      CUBLAS_COMPUTE_32F,
                      w16,
                      IC,
                      x16,
                      IC,
                      out + size_t(n0) * OC,
                      OC,
                      bias,
                      false};
    if (!c.gemm->run(call, c.stream)) {
      fallback(c, "matmul forward", N, IC, OC);
      own_forward(c, out, inp, weight, bias, n0, n1, IC, OC);
    }
  }
}

template <typename T>
void CudaBackend<T>::matmul_backward(Buf<T> dinp_buf, T* dweight, T* dbias, CBuf<T> dout_buf,
                                     CBuf<T> inp_buf, CBuf<T> weight_buf, int N, int IC, int OC) {
  cuda::Context& c = *ctx_;
  T* dinp = cuda::fp32(dinp_buf);
  const T *dout = cuda::fp32(dout_buf), *inp = cuda::fp32(inp_buf),
          *weight = cuda::fp32(weight_buf);
  const GemmMath math = c.options.math;
  if (N == 0) return;
  if (c.options.kernels == KernelSet::Cuda) {
    if (dinp != nullptr) own_dinp(c, dinp, dout, weight, 0, N, IC, OC);
    own_dweight(c, dweight, dout, inp, 0, N, IC, OC);
  } else if (!low_precision(math)) {
    if (dinp != nullptr) {
      const LtCall call{false, false, IC,   N,  OC,      CUDA_R_32F, compute_type(math), weight, IC,
                        dout,  OC,    dinp, IC, nullptr, false};
      if (!c.gemm->run(call, c.stream)) {
        fallback(c, "matmul backward (input)", N, IC, OC);
        own_dinp(c, dinp, dout, weight, 0, N, IC, OC);
      }
    }
    const LtCall call{false, true, IC,      OC, N,       CUDA_R_32F, compute_type(math), inp, IC,
                      dout,  OC,   dweight, IC, nullptr, true};
    if (!c.gemm->run(call, c.stream)) {
      fallback(c, "matmul backward (weight)", N, IC, OC);
      own_dweight(c, dweight, dout, inp, 0, N, IC, OC);
    }
  } else {
    Scratch::Frame f(c.scratch);
    const uint16_t* w16 =
        dinp != nullptr ? cast_rows(f, c, weight, OC, IC, "low-precision weight copy") : nullptr;
    const int rows = chunk_rows(f, N, size_t(IC + OC) * 2);
    require_rows(rows, "matmul gradient copies");
    for (int n0 = 0; n0 < N; n0 += rows) {
      const int n1 = std::min(N, n0 + rows), nc = n1 - n0;
      Scratch::Frame chunk(c.scratch);
      const uint16_t* d16 = cast_rows(chunk, c, dout + size_t(n0) * OC, nc, OC, "gradient copy");
      const uint16_t* x16 = cast_rows(chunk, c, inp + size_t(n0) * IC, nc, IC, "input copy");
      if (dinp != nullptr) {
        const LtCall call{false,
                          false,
                          IC,
                          nc,
                          OC,
                          lt_type(math),
                          CUBLAS_COMPUTE_32F,
                          w16,
                          IC,
                          d16,
                          OC,
                          dinp + size_t(n0) * IC,
                          IC,
                          nullptr,
                          false};
        if (!c.gemm->run(call, c.stream)) {
          fallback(c, "matmul backward (input)", N, IC, OC);
          own_dinp(c, dinp, dout, weight, n0, n1, IC, OC);
        }
      }
      const LtCall call{
          false, true, IC,      OC, nc,      lt_type(math), CUBLAS_COMPUTE_32F, x16, IC,
          d16,   OC,   dweight, IC, nullptr, true};
      if (!c.gemm->run(call, c.stream)) {
        fallback(c, "matmul backward (weight)", N, IC, OC);
        own_dweight(c, dweight, dout, inp, n0, n1, IC, OC);
      }
    }
  }
  if (dbias != nullptr) {
    Scratch::Frame f(c.scratch);
    float* partial = f.take<float>(cuda::colsum_scratch(N, OC), "bias gradient sums");
    cuda::launch_colsum_accumulate(dbias, dout, N, OC, partial, c.stream);
  }
}

template void CudaBackend<float>::matmul_forward(Buf<float>, CBuf<float>, CBuf<float>, CBuf<float>,
                                                 int, int, int);
template void CudaBackend<float>::matmul_backward(Buf<float>, float*, float*, CBuf<float>,
                                                  CBuf<float>, CBuf<float>, int, int, int);

}  // namespace mpitrain
