// CPU backend: the linear layer. Products run one sgemm (fp32 backends: cpu::gemm), oneDNN's bf16
// matmul (cpu_matmul_bf16.cpp) or the blocked sgemm (cpu_blocked_gemm.cpp): cpu_backend.hpp.
// Small fp32 products on several threads run side by side instead (cpu_side_by_side.hpp).
#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>

#include "cpu_blocked_gemm.hpp"
#include "cpu_kernels.hpp"
#include "cpu_matmul_bf16.hpp"
#include "cpu_side_by_side.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

using cpu::gemm;
using cpu::kParallelWork;
using cpu::side_by_side;
using cpu::side_by_side_pays;

template <typename T>
CpuBackend<T>::CpuBackend(int threads, Precision matmul_precision, CpuPages pages)
    : CpuBackend(threads, pages) {
  if (matmul_precision == Precision::Fp32) return;
  if constexpr (std::is_same_v<T, float>) {
    precision_ = matmul_precision;
    // after the thread count is set: oneDNN plans with it
    if (matmul_precision == Precision::Bf16) bf16_.reset(new cpu::Bf16Matmul());
  } else {
    MPITRAIN_THROW("bf16 / fp16 products are for CpuBackend<float>");
  }
}

template <typename T>
bool CpuBackend<T>::bf16_gemms() const {
  return bf16_ != nullptr && bf16_->native();
}

template <typename T>
size_t CpuBackend<T>::host_scratch_bytes() const {
  return staging_->bytes() + (bf16_ ? bf16_->scratch_bytes() : 0);
}

namespace {

// The product as a RowProduct where the products are fp32 and every operand is stored in T.
template <typename T>
std::optional<cpu::RowProduct<T>> fp32_product(Precision products, bool ta, bool tb, int M, int N,
                                               int K, CBuf<T> A, CBuf<T> B, bool accumulate,
                                               Buf<T> C) {
  if (products != Precision::Fp32 || !A.full() || !B.full() || !C.full()) return std::nullopt;
  const int lda = ta ? M : K, ldb = tb ? K : N;  // contiguous
  return cpu::RowProduct<T>{ta, tb, M, N, K, A.full(), lda, B.full(), ldb, accumulate, C.full(), N};
}

}  // namespace

template <typename T>
void CpuBackend<T>::product(bool ta, bool tb, int M, int N, int K, CBuf<T> A, CBuf<T> B,
                            bool accumulate, Buf<T> C, bool a_unchanged) {
  if (const auto p = fp32_product<T>(precision_, ta, tb, M, N, K, A, B, accumulate, C)) {
    if (side_by_side_pays(p->flops(), threads_))
      side_by_side({*p}, threads_);
    else
      p->rows(0, M);
    return;
  }
  if (bf16_product(ta, tb, M, N, K, A, B, accumulate, C, a_unchanged)) return;
  cpu::blocked_product(*staging_, threads_, ta, tb, M, N, K, A, B, accumulate, C);
}

// Operands in bf16 are read in place, float ones converted (cpu_matmul_bf16.hpp). One oneDNN call
// over the whole product: a 2-byte C is written in bf16 by oneDNN itself (the fp32 result rounded
// once, as the emulated path's round_to does), never in blocks of rows, which would repack the
// weights for every block (GPT-2's head in 16-row blocks ran at a third of the one-call rate).
template <typename T>
bool CpuBackend<T>::bf16_product(bool ta, bool tb, int M, int N, int K, CBuf<T> A, CBuf<T> B,
                                 bool accumulate, Buf<T> C, bool a_unchanged, CBuf<T> bias) {
  if constexpr (std::is_same_v<T, float>) {
    const auto readable = [](Precision p) { return p == Precision::Fp32 || p == Precision::Bf16; };
    if (!bf16_gemms() || !readable(A.dtype()) || !readable(B.dtype()) || !readable(C.dtype()) ||
        (bias && !readable(bias.dtype())))
      return false;
    using Bias = cpu::Bf16Matmul::Bias;
    const Bias row = !bias                               ? Bias::None
                     : bias.dtype() == Precision::Bf16 ? Bias::Bf16
                                                       : Bias::Fp32;
    const bool c16 = C.dtype() == Precision::Bf16;
    if (!bf16_->has_kernel(ta, tb, M, N, K, accumulate, c16, row)) return false;
    const uint16_t* a = bf16_->operand_a(A.data(), A.dtype() == Precision::Bf16,
                                         static_cast<size_t>(M) * K, a_unchanged);
    const uint16_t* b =
        bf16_->operand_b(B.data(), B.dtype() == Precision::Bf16, static_cast<size_t>(K) * N);
    if (bias) return bf16_->multiply_biased(ta, tb, M, N, K, a, b, bias.data(), row, C.data(), c16);
    return c16 ? bf16_->multiply(ta, tb, M, N, K, a, b, accumulate, C.half())
               : bf16_->multiply(ta, tb, M, N, K, a, b, accumulate, C.full());
  } else {
    return false;
  }
}

// out(N,OC) = inp(N,IC) @ weight(OC,IC)^T + bias(OC): oneDNN's bf16 matmul adds the bias to the
// fp32 sum itself; elsewhere rows of out start as bias, then accumulate.
template <typename T>
void CpuBackend<T>::matmul_forward(Buf<T> out, CBuf<T> inp, CBuf<T> weight, CBuf<T> bias, int N,
                                   int IC, int OC) {
  if (bias && bf16_product(false, true, N, OC, IC, inp, weight, false, out, false, bias)) return;
  if (bias) {
    const size_t row = OC * out.element_size();
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * OC > kParallelWork)
    for (int n = 0; n < N; ++n)
      std::memcpy((out + static_cast<size_t>(n) * OC).data(), bias.data(), row);
  }
  product(false, true, N, OC, IC, inp, weight, static_cast<bool>(bias), out, false);
}

// dinp(N,IC) = dout(N,OC) @ weight(OC,IC)            (overwritten; skipped if null)
// dweight(OC,IC) += dout^T @ inp(N,IC)               (fp32; Overwrite: =)
// dbias(OC) += sum_n dout[n,:]                       (column blocks, rows in order; Overwrite: =)
template <typename T>
void CpuBackend<T>::matmul_backward(Buf<T> dinp, T* dweight, T* dbias, CBuf<T> dout, CBuf<T> inp,
                                    CBuf<T> weight, int N, int IC, int OC, GradWrite write) {
  const bool add = write == GradWrite::Add;
  if (!add && dbias) std::fill_n(dbias, OC, T(0));  // the column sums below add on it
  if (!add && N == 0) std::fill_n(dweight, static_cast<size_t>(OC) * IC, T(0));  // no product
  if (N == 0) return;
  // small fp32 products: both at once (cpu_side_by_side.hpp)
  const auto dx = fp32_product<T>(precision_, false, false, N, IC, OC, dout, weight, false, dinp);
  const auto dw = fp32_product<T>(precision_, true, false, OC, IC, N, dout, inp, add, dweight);
  if (dx && dw && side_by_side_pays(dw->flops(), threads_)) {
    side_by_side({*dx, *dw}, threads_);
  } else {
    if (dinp) product(false, false, N, IC, OC, dout, weight, false, dinp, false);
    // dout is dinp's A too: its bf16 copy from that product is reused.
    product(true, false, OC, IC, N, dout, inp, add, dweight, static_cast<bool>(dinp));
  }
  if (dbias == nullptr) return;
  // a 2-byte dout's pieces are widened on the fly: no block of it goes through memory as fp32
  cpu::for_row_pieces(dout, CBuf<T>(), N, OC, [&](int c0, int width, const T* d, const T*, size_t) {
#pragma omp simd
    for (int c = 0; c < width; ++c) dbias[c0 + c] += d[c];
  });
}

#define MPITRAIN_INSTANTIATE(T)                                                                  \
  template CpuBackend<T>::CpuBackend(int, Precision, CpuPages);                                  \
  template bool CpuBackend<T>::bf16_gemms() const;                                               \
  template size_t CpuBackend<T>::host_scratch_bytes() const;                                     \
  template void CpuBackend<T>::matmul_forward(Buf<T>, CBuf<T>, CBuf<T>, CBuf<T>, int, int, int); \
  template void CpuBackend<T>::matmul_backward(Buf<T>, T*, T*, CBuf<T>, CBuf<T>, CBuf<T>, int,   \
                                               int, int, GradWrite);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
