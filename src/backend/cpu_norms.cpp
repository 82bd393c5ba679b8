// CPU backend: LayerNorm and RMSNorm over the last dim C of N rows, one row kernel each for the
// forward and the input gradient and one for a row's piece of the weight/bias gradients, run over
// fp32 tensors in place or over 2-byte ones a widened row at a time (for_rows, below).
#include <cmath>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::for_forward_rows;
using cpu::for_row_pieces;
using cpu::for_rows;

namespace {

// ---- LayerNorm ----------------------------------------------------------------------------

// one row: mean = sum x / C; rstd = 1/sqrt(sum (x-mean)^2 / C + eps); out = (x-mean) rstd w + b
template <typename T>
inline void layernorm_row(T* o, T* mean, T* rstd, const T* x, const T* w, const T* b, int C,
                          T eps) {
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
  *mean = m;
  *rstd = r;
}

// one row: norm = (x-mean) rstd; dnorm = dout w
// dinp += rstd (dnorm - mean(dnorm) - norm mean(dnorm norm))
template <typename T>
inline void layernorm_dinp_row(T* di, const T* d, const T* x, const T* w, T m, T r, int C) {
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
  for (int c = 0; c < C; ++c) di[c] += r * (d[c] * w[c] - dn_mean - (x[c] - m) * r * dnn_mean);
}

// one row's share of the sums over rows, on `width` columns: dw += dout norm;  db += dout
template <typename T>
inline void layernorm_dwdb_piece(T* dw, T* db, const T* d, const T* x, T m, T r, int width) {
#pragma omp simd
  for (int c = 0; c < width; ++c) {
    dw[c] += d[c] * (x[c] - m) * r;
    db[c] += d[c];
  }
}

// ---- RMSNorm ------------------------------------------------------------------------------

// one row: norm = x rstd; dnorm = dout w; dinp += rstd (dnorm - norm mean(dnorm norm))
template <typename T>
inline void rmsnorm_dinp_row(T* di, const T* d, const T* x, const T* w, T r, int C) {
  T dnn_mean = 0;
#pragma omp simd reduction(+ : dnn_mean)
  for (int c = 0; c < C; ++c) dnn_mean += d[c] * w[c] * x[c] * r;
  dnn_mean /= C;
#pragma omp simd
  for (int c = 0; c < C; ++c) di[c] += r * (d[c] * w[c] - x[c] * r * dnn_mean);
}

// one row's share of dw += sum_n dout norm, on `width` columns
template <typename T>
inline void rmsnorm_dw_piece(T* dw, const T* d, const T* x, T r, int width) {
#pragma omp simd
  for (int c = 0; c < width; ++c) dw[c] += d[c] * x[c] * r;
}

// ---- over the rows ------------------------------------------------------------------------
// The row kernels run in parallel over rows, the sums over rows (weight and bias gradients) in
// parallel over column blocks with the rows in order, so there are no races and no scratch. On
// 2-byte tensors each thread widens a row (or a column block's piece of one) into its own fp32
// arrays (cpu::ThreadRows), runs the same kernel and rounds the output row into the tensor.

// An input gradient's rows: f(di, d, x, n) on the rows of dinp, dout and inp in place, or on
// the thread's fp32 copies of 2-byte rows (dinp's += reads its old values), di rounded back.
template <typename T, class F>
void for_backward_rows(cpu::Staging& staging, Buf<T> dinp, CBuf<T> dout, CBuf<T> inp, int N,
                       int C, F&& f) {
  if (T* di = dinp.full()) {
    const T *d = dout.full(), *x = inp.full();
    return for_rows(N, C, [&](size_t n) { f(di + n * C, d + n * C, x + n * C, n); });
  }
  const cpu::ThreadRows<T> rows(staging, cpu::kSlotA, 3, C);
  for_rows(N, C, [&](size_t n) {
    T *di = rows.row(0, n), *d = rows.row(1, n), *x = rows.row(2, n);
    cpu::widen_row(di, CBuf<T>(dinp + n * C), C);
    cpu::widen_row(d, dout + n * C, C);
    cpu::widen_row(x, inp + n * C, C);
    f(di, d, x, n);
    cpu::narrow_row(dinp + n * C, di, C);
  });
}

}  // namespace

// The tensors are all fp32 or all 2-byte (cpu::staged checks); w and b are widened once.
template <typename T>
void CpuBackend<T>::layernorm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, CBuf<T> w,
                                      CBuf<T> b, int N, int C, T eps) {
  cpu::staged(out, inp, w, b);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  const T* b32 = staging_->widened(cpu::kSlotBias, b, C);
  for_forward_rows(*staging_, out, inp, N, C, [&](T* o, const T* x, size_t n) {
    layernorm_row(o, mean + n, rstd + n, x, w32, b32, C, eps);
  });
}

template <typename T>
void CpuBackend<T>::layernorm_backward(Buf<T> dinp, T* dw, T* db, CBuf<T> dout, CBuf<T> inp,
                                       CBuf<T> w, const T* mean, const T* rstd, int N, int C) {
  cpu::staged(dinp, dout, inp, w);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  for_backward_rows(*staging_, dinp, dout, inp, N, C,
                    [&](T* di, const T* d, const T* x, size_t n) {
                      layernorm_dinp_row(di, d, x, w32, mean[n], rstd[n], C);
                    });
  for_row_pieces(dout, inp, N, C, [&](int c0, int width, const T* d, const T* x, size_t n) {
    layernorm_dwdb_piece(dw + c0, db + c0, d, x, mean[n], rstd[n], width);
  });
}

template <typename T>
void CpuBackend<T>::rmsnorm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> w, int N, int C,
                                    T eps) {
  cpu::staged(out, inp, w);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  for_forward_rows(*staging_, out, inp, N, C, [&](T* o, const T* x, size_t n) {
    rstd[n] = cpu::rmsnorm_row(o, x, w32, C, eps);
  });
}

template <typename T>
void CpuBackend<T>::rmsnorm_backward(Buf<T> dinp, T* dw, CBuf<T> dout, CBuf<T> inp, CBuf<T> w,
                                     const T* rstd, int N, int C) {
  cpu::staged(dinp, dout, inp, w);
  const T* w32 = staging_->widened(cpu::kSlotWeight, w, C);
  for_backward_rows(*staging_, dinp, dout, inp, N, C,
                    [&](T* di, const T* d, const T* x, size_t n) {
                      rmsnorm_dinp_row(di, d, x, w32, rstd[n], C);
                    });
  for_row_pieces(dout, inp, N, C, [&](int c0, int width, const T* d, const T* x, size_t n) {
    rmsnorm_dw_piece(dw + c0, d, x, rstd[n], width);
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
