// CPU backend: the linear layer, one OpenBLAS gemm per product.
#include <cstring>

#include "cpu_kernels.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::gemm;
using cpu::kParallelWork;

// out(N,OC) = inp(N,IC) @ weight(OC,IC)^T + bias(OC): rows of out start as bias, then beta = 1.
template <typename T>
void CpuBackend<T>::matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N,
                                   int IC, int OC) {
  if (bias != nullptr) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * OC > kParallelWork)
    for (int n = 0; n < N; ++n) std::memcpy(out + static_cast<size_t>(n) * OC, bias, OC * sizeof(T));
  }
  gemm(CblasNoTrans, CblasTrans, N, OC, IC, T(1), inp, IC, weight, IC, bias ? T(1) : T(0), out, OC);
}

// dinp(N,IC) = dout(N,OC) @ weight(OC,IC)            (overwritten; skipped if null)
// dweight(OC,IC) += dout^T @ inp(N,IC)               (beta = 1)
// dbias(OC) += sum_n dout[n,:]                       (column blocks, rows in order)
template <typename T>
void CpuBackend<T>::matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp,
                                    const T* weight, int N, int IC, int OC) {
  if (dinp != nullptr)
    gemm(CblasNoTrans, CblasNoTrans, N, IC, OC, T(1), dout, OC, weight, IC, T(0), dinp, IC);
  gemm(CblasTrans, CblasNoTrans, OC, IC, N, T(1), dout, OC, inp, IC, T(1), dweight, IC);
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

#define MPITRAIN_INSTANTIATE(T)                                                                 \
  template void CpuBackend<T>::matmul_forward(T*, const T*, const T*, const T*, int, int, int); \
  template void CpuBackend<T>::matmul_backward(T*, T*, T*, const T*, const T*, const T*, int,   \
                                               int, int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
