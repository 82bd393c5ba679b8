// CUDA backend: the linear layer. Row-major (N,IC) x (OC,IC)^T products are column-major
// cuBLASLt calls on the same memory:
//   out(N,OC) = inp W^T      ->  out^T (OC x N)  = W^T_cm(IC x OC)^T . inp^T_cm (IC x N)
//   dinp(N,IC) = dout W      ->  dinp^T (IC x N) = W_cm (IC x OC) . dout^T_cm (OC x N)
//   dW(OC,IC) += dout^T inp  ->  dW^T (IC x OC) += inp_cm (IC x N) . (dout_cm (OC x N))^T
// (X_cm: the row-major matrix X read column-major, i.e. X^T.) fp32/tf32 math runs on the fp32
// tensors; bf16/fp16 math reads operands stored in that type as they lie in memory, and casts an
// fp32 operand (the emulated path's containers) into the workspace, the activations in chunks
// of rows; fp32 accumulation; out/dinp written in their own type, dW fp32 (beta = 1). The bias
// is cuBLASLt's epilogue (fp32); its gradient a fixed-order column sum. Where cuBLASLt has no
// algorithm, and for the `cuda` kernel set, our own GEMM kernel runs with the same operand
// rounding.
#include <algorithm>

#include "context.hpp"
#include "kernels.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda_backend.hpp"

namespace mpitrain {

using cuda::In;
using cuda::LtCall;
using cuda::Out;
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

// Our kernel on rows [n0, n1) of the batch.
void own_forward(cuda::Context& c, Out out, In inp, In w, In bias, int n0, int n1, int IC, int OC) {
  cuda::launch_gemm(out + size_t(n0) * OC, inp + size_t(n0) * IC, w, bias, n1 - n0, OC, IC, IC, 1,
                    1, IC, OC, false, operand_precision(c.options.math), c.stream);
}
void own_dinp(cuda::Context& c, Out dinp, In dout, In w, int n0, int n1, int IC, int OC) {
  cuda::launch_gemm(dinp + size_t(n0) * IC, dout + size_t(n0) * OC, w, nullptr, n1 - n0, IC, OC, OC,
                    1, IC, 1, IC, false, operand_precision(c.options.math), c.stream);
}
void own_dweight(cuda::Context& c, float* dw, In dout, In inp, int n0, int n1, int IC, int OC) {
  cuda::launch_gemm(dw, dout + size_t(n0) * OC, inp + size_t(n0) * IC, nullptr, OC, IC, n1 - n0, 1,
                    OC, IC, 1, IC, true, operand_precision(c.options.math), c.stream);
}

void fallback(cuda::Context& c, const char* what, int N, int IC, int OC) {
  c.report_fallback(std::string("cuBLASLt has no algorithm for ") + what + " N=" +
                    std::to_string(N) + " IC=" + std::to_string(IC) + " OC=" + std::to_string(OC) +
                    " (" + to_string(c.options.math) + "); using the CUDA GEMM kernel");
}

cudaDataType_t lt_type(Precision p) {
  if (p == Precision::Fp16) return CUDA_R_16F;
  return p == Precision::Bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// Bytes per row of an operand that must be cast into the workspace (0: read in place).
size_t cast_bytes(In x, Precision io, int cols) { return x.dtype() == io ? 0 : size_t(cols) * 2; }

// Rows per chunk so that `row_bytes` per row fit in what the frame has left (multiples of 128).
int chunk_rows(const Scratch::Frame& f, int N, size_t row_bytes, const char* what) {
  if (row_bytes == 0) return N;
  const size_t fit = (f.available() > 2 * cuda::DeviceArena::kAlign)
                         ? (f.available() - 2 * cuda::DeviceArena::kAlign) / row_bytes
                         : 0;
  if (fit >= static_cast<size_t>(N)) return N;
  const int rows = static_cast<int>(fit / 128 * 128);
  if (rows == 0)
    MPITRAIN_THROW(std::string("CUDA workspace too small for one chunk of 128 rows of the ") +
                   what + " (raise the workspace size)");
  return rows;
}

// rows x cols of x in the io type: in place when it is stored so, else a copy in the frame.
const void* operand(Scratch::Frame& f, cuda::Context& c, In x, Precision io, size_t rows,
                    size_t cols, const char* what) {
  if (x.dtype() == io) return x.data();
  if (x.dtype() != Precision::Fp32)
    MPITRAIN_THROW(std::string("matmul: ") + what + " stored in " + to_string(x.dtype()) +
                   " under " + to_string(io) + " GEMM math");
  const Out dst(f.bytes(rows * cols * 2, what), io);
  cuda::launch_convert(dst, x, rows, cols, cols, c.stream);
  return dst.data();
}

bool all_fp32(std::initializer_list<In> xs) {
  for (const In& x : xs)
    if (!(x == nullptr) && x.dtype() != Precision::Fp32) return false;
  return true;
}

}  // namespace

template <typename T>
void CudaBackend<T>::matmul_forward(Buf<T> out_buf, CBuf<T> inp_buf, CBuf<T> weight_buf,
                                    CBuf<T> bias_buf, int N, int IC, int OC) {
  cuda::Context& c = *ctx_;
  const Out out = out_buf;
  const In inp = inp_buf, weight = weight_buf, bias = bias_buf;
  const GemmMath math = c.options.math;
  const Precision io = operand_precision(math);
  if (N == 0) return;
  if (c.options.kernels == KernelSet::Cuda ||
      (io == Precision::Fp32 && !all_fp32({out, inp, weight, bias})))
    return own_forward(c, out, inp, weight, bias, 0, N, IC, OC);
  Scratch::Frame f(c.scratch);
  const void* w = operand(f, c, weight, io, OC, IC, "low-precision weight copy");
  const int rows = chunk_rows(f, N, cast_bytes(inp, io, IC), "matmul input copy");
  for (int n0 = 0; n0 < N; n0 += rows) {
    const int n1 = std::min(N, n0 + rows);
    Scratch::Frame chunk(c.scratch);
    const void* x = operand(chunk, c, inp + size_t(n0) * IC, io, n1 - n0, IC, "input copy");
    const LtCall call{true,
                      false,
                      OC,
                      n1 - n0,
                      IC,
                      lt_type(io),
                      compute_type(math),
                      w,
                      IC,
                      x,
                      IC,
                      (out + size_t(n0) * OC).data(),
                      lt_type(out.dtype()),
                      OC,
                      bias.data(),
                      lt_type(bias.dtype()),
                      false};
    if (!c.gemm->run(call, c.stream)) {
      fallback(c, "matmul forward", N, IC, OC);
      own_forward(c, out, inp, weight, bias, n0, n1, IC, OC);
    }
  }
}

// GradWrite::Overwrite: dweight and dbias are zeroed on the stream first and the sums below add
// on them (a memset at the device's bandwidth, what the zeroing pass it replaces cost).
template <typename T>
void CudaBackend<T>::matmul_backward(Buf<T> dinp_buf, T* dweight, T* dbias, CBuf<T> dout_buf,
                                     CBuf<T> inp_buf, CBuf<T> weight_buf, int N, int IC, int OC,
                                     GradWrite write) {
  cuda::Context& c = *ctx_;
  const Out dinp = dinp_buf;
  const In dout = dout_buf, inp = inp_buf, weight = weight_buf;
  const GemmMath math = c.options.math;
  const Precision io = operand_precision(math);
  const bool with_dinp = !(dinp == nullptr);
  if (write == GradWrite::Overwrite) {
    zero(Buf<T>(dweight), static_cast<size_t>(OC) * IC);
    if (dbias != nullptr) zero(Buf<T>(dbias), OC);
  }
  if (N == 0) return;
  if (c.options.kernels == KernelSet::Cuda ||
      (io == Precision::Fp32 && !all_fp32({dinp, dout, inp, weight}))) {
    if (with_dinp) own_dinp(c, dinp, dout, weight, 0, N, IC, OC);
    own_dweight(c, dweight, dout, inp, 0, N, IC, OC);
  } else {
    Scratch::Frame f(c.scratch);
    const void* w =
        with_dinp ? operand(f, c, weight, io, OC, IC, "low-precision weight copy") : nullptr;
    const int rows = chunk_rows(f, N, cast_bytes(dout, io, OC) + cast_bytes(inp, io, IC),
                                "matmul gradient copies");
    for (int n0 = 0; n0 < N; n0 += rows) {
      const int n1 = std::min(N, n0 + rows), nc = n1 - n0;
      Scratch::Frame chunk(c.scratch);
      const void* d = operand(chunk, c, dout + size_t(n0) * OC, io, nc, OC, "gradient copy");
      const void* x = operand(chunk, c, inp + size_t(n0) * IC, io, nc, IC, "input copy");
      if (with_dinp) {
        const LtCall call{false,
                          false,
                          IC,
                          nc,
                          OC,
                          lt_type(io),
                          compute_type(math),
                          w,
                          IC,
                          d,
                          OC,
                          (dinp + size_t(n0) * IC).data(),
                          lt_type(dinp.dtype()),
                          IC,
                          nullptr,
                          CUDA_R_32F,
                          false};
        if (!c.gemm->run(call, c.stream)) {
          fallback(c, "matmul backward (input)", N, IC, OC);
          own_dinp(c, dinp, dout, weight, n0, n1, IC, OC);
        }
      }
      const LtCall call{false,   true,       IC,  OC, nc,      lt_type(io), compute_type(math),
                        x,       IC,         d,   OC, dweight, CUDA_R_32F,  IC,
                        nullptr, CUDA_R_32F, true};
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
                                                  CBuf<float>, CBuf<float>, int, int, int,
                                                  GradWrite);

}  // namespace mpitrain
