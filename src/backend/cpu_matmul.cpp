// CPU backend: the linear layer, one gemm per product: OpenBLAS, or oneDNN's bf16 matmul when the
// backend is constructed for bf16 (cpu_matmul_bf16.cpp).
#include <cstring>
#include <type_traits>

#include "cpu_kernels.hpp"
#include "cpu_matmul_bf16.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

using cpu::gemm;
using cpu::kParallelWork;

template <typename T>
CpuBackend<T>::CpuBackend(int threads, Precision matmul_precision) : CpuBackend(threads) {
  if (matmul_precision != Precision::Bf16) return;
  if constexpr (std::is_same_v<T, float>) {
    bf16_.reset(new cpu::Bf16Matmul());  // after the thread count is set: oneDNN plans with it
  } else {
    MPITRAIN_THROW("bf16 GEMMs are for CpuBackend<float>");
  }
}

template <typename T>
bool CpuBackend<T>::bf16_gemms() const {
  return bf16_ != nullptr && bf16_->native();
}

template <typename T>
void CpuBackend<T>::product(bool ta, bool tb, int M, int N, int K, const T* A, const T* B,
                            bool accumulate, T* C, bool a_unchanged) {
  if constexpr (std::is_same_v<T, float>) {
    if (bf16_ != nullptr && bf16_->multiply(ta, tb, M, N, K, A, B, accumulate, C, a_unchanged))
      return;
  }
  gemm(ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, T(1), A, ta ? M : K,
       B, tb ? K : N, accumulate ? T(1) : T(0), C, N);
}

// out(N,OC) = inp(N,IC) @ weight(OC,IC)^T + bias(OC): rows of out start as bias, then accumulate.
template <typename T>
void CpuBackend<T>::matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N,
                                   int IC, int OC) {
  if (bias != nullptr) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * OC > kParallelWork)
    for (int n = 0; n < N; ++n) std::memcpy(out + static_cast<size_t>(n) * OC, bias, OC * sizeof(T));
  }
  product(false, true, N, OC, IC, inp, weight, bias != nullptr, out, false);
}

// dinp(N,IC) = dout(N,OC) @ weight(OC,IC)            (overwritten; skipped if null)
// dweight(OC,IC) += dout^T @ inp(N,IC)               (accumulated)
// dbias(OC) += sum_n dout[n,:]                       (column blocks, rows in order)
template <typename T>
void CpuBackend<T>::matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                                    const T* weight, int N, int IC, int OC) {
  if (dinp != nullptr) product(false, false, N, IC, OC, dout, weight, false, dinp, false);
  // dout is dinp's A too: its bf16 copy from that product is reused.
  product(true, false, OC, IC, N, dout, inp, true, dweight, dinp != nullptr);
  if (dbias != nullptr) {
    cpu::for_column_blocks(OC, N, [&](int c0, int c1) {
      for (int n = 0; n < N; ++n) {
        const T* d = dout + static_cast<size_t>(n) * OC;
#pragma omp simd
        for (int c = c0; c < c1; ++c) dbias[c] += d[c];
      }
    });
  }
}

#define MPITRAIN_INSTANTIATE(T)                                                                    \
  template CpuBackend<T>::CpuBackend(int, Precision);                                              \
  template bool CpuBackend<T>::bf16_gemms() const;                                                 \
  template void CpuBackend<T>::matmul_forward(T*, const T*, const T*, const T*, int, int, int);    \
  template void CpuBackend<T>::matmul_backward(T*, T*, T*, const T*, const T*, const T*, int, int, \
                                               int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
