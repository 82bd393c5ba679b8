// CPU backend: LayerNorm and RMSNorm over the last dim C of N rows. Forward and the input
// gradient run in parallel over rows; the weight/bias gradients (sums over rows) in parallel over
// column blocks, so there are no races and no scratch. On 2-byte tensors: blocks of rows staged
// (cpu_storage.hpp); the input gradient's += reads the old 2-byte values, and the weight/bias
// gradients take the blocks in order, so each element sums its rows in the kernel's order.
#include <cmath>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::kParallelWork;

namespace {

// ---- LayerNorm ----------------------------------------------------------------------------

// mean = sum x / C; rstd = 1/sqrt(sum (x-mean)^2 / C + eps); out = (x-mean) rstd w + b
template <typename T>
void layernorm_forward_kernel(T* out, T* mean, T* rstd, const T* inp, const T* w, const T* b, int N,
                              int C, T eps) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    T* o = out + static_cast<size_t>(n) * C;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int c = 0; c < C; ++c) s += x[c];
    const T m = s / C;
    T v = 0;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    const T r = T(1) / std::sqrt(v / C + eps);
#pragma omp simd
    for (int c = 0; c < C; ++c) o[c] = (x[c] - m) * r * w[c] + b[c];
    mean[n] = m;
    rstd[n] = r;
  }
}

// norm = (x-mean) rstd; dnorm = dout w
// dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm))
// dw += sum_n dout norm;  db += sum_n dout
template <typename T>
void layernorm_backward_kernel(T* dinp, T* dw, T* db, const T* dout, const T* inp, const T* w,
                               const T* mean, const T* rstd, int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    const T* d = dout + static_cast<size_t>(n) * C;
    T* di = dinp + static_cast<size_t>(n) * C;
    const T m = mean[n], r = rstd[n];
    T dn_mean = 0, dnn_mean = 0;
#pragma omp simd reduction(+ : dn_mean, dnn_mean)
    for (int c = 0; c < C; ++c) {
      const T dn = d[c] * w[c];
      dn_mean += dn;
      dnn_mean += dn * (x[c] - m) * r;
    }
    dn_mean /= C;
    dnn_mean /= C;
#pragma omp simd
    for (int c = 0; c < C; ++c)
      di[c] += r * (d[c] * w[c] - dn_mean - (x[c] - m) * r * dnn_mean);
  }
  cpu::for_column_blocks(C, N, [&](int c0, int c1) {
    for (int n = 0; n < N; ++n) {
      const T* x = inp + static_cast<size_t>(n) * C;
      const T* d = dout + static_cast<size_t>(n) * C;
      const T m = mean[n], r = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; ++c) {
        dw[c] += d[c] * (x[c] - m) * r;
        db[c] += d[c];
      }
    }
  });
}

// ---- RMSNorm ------------------------------------------------------------------------------

// rstd = 1/sqrt(sum x^2 / C + eps); out = x rstd w
template <typename T>
void rmsnorm_forward_kernel(T* out, T* rstd, const T* inp, const T* w, int N, int C, T eps) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    rstd[n] = cpu::rmsnorm_row(out + static_cast<size_t>(n) * C, x, w, C, eps);
  }
}

// norm = x rstd; dnorm = dout w; dinp += rstd (dnorm - norm mean(dnorm norm)); dw += sum_n dout norm
template <typename T>
void rmsnorm_backward_kernel(T* dinp, T* dw, const T* dout, const T* inp, const T* w, const T* rstd,
                             int N, int C) {
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * C > kParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = inp + static_cast<size_t>(n) * C;
    const T* d = dout + static_cast<size_t>(n) * C;
    T* di = dinp + static_cast<size_t>(n) * C;
    const T r = rstd[n];
    T dnn_mean = 0;
#pragma omp simd reduction(+ : dnn_mean)
    for (int c = 0; c < C; ++c) dnn_mean += d[c] * w[c] * x[c] * r;
    dnn_mean /= C;
#pragma omp simd
    for (int c = 0; c < C; ++c) di[c] += r * (d[c] * w[c] - x[c] * r * dnn_mean);
  }
  cpu::for_column_blocks(C, N, [&](int c0, int c1) {
    for (int n = 0; n < N; ++n) {
      const T* x = inp + static_cast<size_t>(n) * C;
      const T* d = dout + static_cast<size_t>(n) * C;
      const T r = rstd[n];
#pragma omp simd
      for (int c = c0; c < c1; ++c) dw[c] += d[c] * x[c] * r;
    }
  });
}

}  // namespace

template <typename T>
void CpuBackend<T>::layernorm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, CBuf<T> w,
                                      CBuf<T> b, int N, int C, T eps) {
  if (!cpu::staged(out, inp, w, b))
    return layernorm_forward_kernel(out.full(), mean, rstd, inp.full(), w.full(), b.full(), N, C,
                                    eps);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  const T* b32 = staging_->widened(cpu::kSlotBias, b, C);
  cpu::for_row_blocks(N, C, [&](size_t n0, size_t rows) {
    const size_t at = n0 * C, n = rows * C;
    T* o = staging_->take<T>(cpu::kSlotC, n);
    layernorm_forward_kernel(o, mean + n0, rstd + n0, staging_->widened(cpu::kSlotA, inp + at, n),
                             w32, b32, static_cast<int>(rows), C, eps);
    cpu::narrow(out + at, o, n);
  });
}

template <typename T>
void CpuBackend<T>::layernorm_backward(Buf<T> dinp, T* dw, T* db, CBuf<T> dout, CBuf<T> inp,
                                       CBuf<T> w, const T* mean, const T* rstd, int N, int C) {
  if (!cpu::staged(dinp, dout, inp, w))
    return layernorm_backward_kernel(dinp.full(), dw, db, dout.full(), inp.full(), w.full(), mean,
                                     rstd, N, C);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  cpu::for_row_blocks(N, C, [&](size_t n0, size_t rows) {
    const size_t at = n0 * C, n = rows * C;
    T* di = staging_->take<T>(cpu::kSlotC, n);
    cpu::widen(di, CBuf<T>(dinp + at), n);
    layernorm_backward_kernel(di, dw, db, staging_->widened(cpu::kSlotA, dout + at, n),
                              staging_->widened(cpu::kSlotB, inp + at, n), w32, mean + n0,
                              rstd + n0, static_cast<int>(rows), C);
    cpu::narrow(dinp + at, di, n);
  });
}

template <typename T>
void CpuBackend<T>::rmsnorm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> w, int N, int C,
                                    T eps) {
  if (!cpu::staged(out, inp, w))
    return rmsnorm_forward_kernel(out.full(), rstd, inp.full(), w.full(), N, C, eps);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  cpu::for_row_blocks(N, C, [&](size_t n0, size_t rows) {
    const size_t at = n0 * C, n = rows * C;
    T* o = staging_->take<T>(cpu::kSlotC, n);
    rmsnorm_forward_kernel(o, rstd + n0, staging_->widened(cpu::kSlotA, inp + at, n), w32,
                           static_cast<int>(rows), C, eps);
    cpu::narrow(out + at, o, n);
  });
}

template <typename T>
void CpuBackend<T>::rmsnorm_backward(Buf<T> dinp, T* dw, CBuf<T> dout, CBuf<T> inp, CBuf<T> w,
                                     const T* rstd, int N, int C) {
  if (!cpu::staged(dinp, dout, inp, w))
    return rmsnorm_backward_kernel(dinp.full(), dw, dout.full(), inp.full(), w.full(), rstd, N, C);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  cpu::for_row_blocks(N, C, [&](size_t n0, size_t rows) {
    const size_t at = n0 * C, n = rows * C;
    T* di = staging_->take<T>(cpu::kSlotC, n);
    cpu::widen(di, CBuf<T>(dinp + at), n);
    rmsnorm_backward_kernel(di, dw, staging_->widened(cpu::kSlotA, dout + at, n),
                            staging_->widened(cpu::kSlotB, inp + at, n), w32, rstd + n0,
                            static_cast<int>(rows), C);
    cpu::narrow(dinp + at, di, n);
  });
}

#define MPITRAIN_INSTANTIATE(T)                                                                  \
  template void CpuBackend<T>::layernorm_forward(Buf<T>, T*, T*, CBuf<T>, CBuf<T>, CBuf<T>, int, \
                                                 int, T);                                        \
  template void CpuBackend<T>::layernorm_backward(Buf<T>, T*, T*, CBuf<T>, CBuf<T>, CBuf<T>,     \
                                                  const T*, const T*, int, int);                 \
  template void CpuBackend<T>::rmsnorm_forward(Buf<T>, T*, CBuf<T>, CBuf<T>, int, int, T);       \
  template void CpuBackend<T>::rmsnorm_backward(Buf<T>, T*, CBuf<T>, CBuf<T>, CBuf<T>, const T*, \
                                                int, int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
