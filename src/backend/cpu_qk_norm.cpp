// CPU backend: per-head q/k RMSNorm (qk_norm) on qkv(N,(NH+2NKV)*hs): each of a row's NH q heads
// and NKV k heads is normalized over its hs values and scaled by wq / wk (shared by the heads); v
// passes through. Rows in parallel; the weight gradients (sums over rows and heads) in parallel
// over columns, so there are no races and no scratch. On 2-byte tensors the same kernels run on
// rows (and the sums on pieces of rows) widened into each thread's own arrays (cpu_storage.hpp):
// the bits of the fp32 kernels on the rounded values.
#include <algorithm>
#include <cmath>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::kParallelWork;

namespace {

// one row: per head h (q heads first, then k): rstd = 1/sqrt(sum x^2 / hs + eps); out = x rstd w;
// v copied
template <typename T>
void qk_norm_row(T* orow, T* rstd, const T* row, const T* wq, const T* wk, int NH, int NKV, int hs,
                 T eps) {
  const int heads = NH + NKV;
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
  const size_t normed = static_cast<size_t>(heads) * hs;  // the q and k heads; v after them
  for (int h = 0; h < heads; ++h) {
    const size_t at = static_cast<size_t>(h) * hs;
    rstd[h] = cpu::rmsnorm_row(orow + at, row + at, h < NH ? wq : wk, hs, eps);
  }
  std::copy(row + normed, row + QKV, orow + normed);
}

// one row's input gradient in place, per head: norm = x rstd;
// d = rstd (dout w - norm mean(dout w norm))
template <typename T>
void qk_norm_dinp_row(T* drow, const T* row, const T* wq, const T* wk, const T* rstd, int NH,
                      int NKV, int hs) {
  for (int h = 0; h < NH + NKV; ++h) {
    const size_t at = static_cast<size_t>(h) * hs;
    const T* x = row + at;
    const T* w = h < NH ? wq : wk;
    T* dh = drow + at;
    const T r = rstd[h];
    T dnn_mean = 0;
#pragma omp simd reduction(+ : dnn_mean)
    for (int c = 0; c < hs; ++c) dnn_mean += dh[c] * w[c] * x[c] * r;
    dnn_mean /= hs;
#pragma omp simd
    for (int c = 0; c < hs; ++c) dh[c] = r * (dh[c] * w[c] - x[c] * r * dnn_mean);
  }
}

// Columns the weight gradients' sums take a task: one cache line of the storage type P, so no
// two tasks read the same line.
template <Precision P>
constexpr int kPiece = P == Precision::Fp32 ? 16 : 32;

// dw += sum over rows and heads of dout norm (dq heads into dwq, dk heads into dwk), from d
// before the input gradient overwrites it. The sums run per column over the rows in order and
// each row's heads in order, in parallel over pieces of kPiece columns, each row's heads read a
// piece at a time (a column at a time over all rows read 4 bytes a cache line). P: how d and inp
// are stored, Fp32 read in place, 2-byte pieces widened inline into the task's arrays.
template <Precision P, typename T>
void qk_norm_weight_grads(T* dwq, T* dwk, CBuf<T> d, CBuf<T> inp, const T* rstd, int N, int NH,
                          int NKV, int hs) {
  const int heads = NH + NKV;
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
  constexpr int piece = kPiece<P>;
  const T *d32 = d.full(), *x32 = inp.full();
  const uint16_t *d16 = d.half(), *x16 = inp.half();
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * QKV > kParallelWork)
  for (int c0 = 0; c0 < hs; c0 += piece) {
    const int width = std::min(piece, hs - c0);
    T sq[piece], sk[piece];
    alignas(64) T dp[piece], xp[piece];
    std::copy_n(dwq + c0, width, sq);
    std::copy_n(dwk + c0, width, sk);
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < heads; ++h) {
        const size_t i = n * QKV + static_cast<size_t>(h) * hs + c0;
        const T *dh = dp, *x = xp;
        if constexpr (P == Precision::Fp32) {
          dh = d32 + i;
          x = x32 + i;
        } else {
          cpu::widen_bits<P>(dp, d16 + i, width);
          cpu::widen_bits<P>(xp, x16 + i, width);
        }
        const T r = rstd[static_cast<size_t>(n) * heads + h];
        T* s = h < NH ? sq : sk;
#pragma omp simd
        for (int c = 0; c < width; ++c) s[c] += dh[c] * x[c] * r;
      }
    std::copy_n(sq, width, dwq + c0);
    std::copy_n(sk, width, dwk + c0);
  }
}

}  // namespace

// Rows in parallel; on 2-byte tensors each thread widens a row into its own fp32 arrays
// (cpu::for_forward_rows), runs the same row kernel and rounds the row straight back.
template <typename T>
void CpuBackend<T>::qk_norm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk, int N,
                                    int NH, int NKV, int hs, T eps) {
  cpu::staged(out, inp, wq, wk);  // refuses operands of mixed storage types
  const int QKV = (NH + 2 * NKV) * hs;
  const size_t heads = NH + NKV;
  const T* wq32 = staging_->widened(cpu::kSlotWeight, wq, hs);
  const T* wk32 = staging_->widened(cpu::kSlotBias, wk, hs);
  cpu::for_forward_rows(*staging_, out, inp, N, QKV, [&](T* o, const T* x, size_t n) {
    qk_norm_row(o, rstd + n * heads, x, wq32, wk32, NH, NKV, hs, eps);
  });
}

// The weight gradients first (they read dout, which the input gradient then overwrites), then
// the rows in parallel, on 2-byte tensors widened a row at a time (the q and k heads: v's
// gradient passes through untouched).
template <typename T>
void CpuBackend<T>::qk_norm_backward(Buf<T> dqkv, T* dwq, T* dwk, CBuf<T> inp, CBuf<T> wq,
                                     CBuf<T> wk, const T* rstd, int N, int NH, int NKV, int hs) {
  const bool staged = cpu::staged(dqkv, inp, wq, wk);
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs, heads = NH + NKV;
  const size_t normed = heads * hs;
  const T* wq32 = staging_->widened(cpu::kSlotWeight, wq, hs);
  const T* wk32 = staging_->widened(cpu::kSlotBias, wk, hs);
  const CBuf<T> d(dqkv);
  if (!staged) {
    qk_norm_weight_grads<Precision::Fp32>(dwq, dwk, d, inp, rstd, N, NH, NKV, hs);
    return cpu::for_rows(N, QKV, [&](size_t n) {
      qk_norm_dinp_row(dqkv.full() + n * QKV, inp.full() + n * QKV, wq32, wk32, rstd + n * heads,
                       NH, NKV, hs);
    });
  }
  cpu::with_half_type(d.dtype(), [&](auto P) {
    qk_norm_weight_grads<P()>(dwq, dwk, d, inp, rstd, N, NH, NKV, hs);
  });
  const cpu::ThreadRows<T> rows(*staging_, cpu::kSlotA, 2, QKV);
  cpu::for_rows(N, QKV, [&](size_t n) {
    T *dh = rows.row(0, n), *x = rows.row(1, n);
    cpu::widen_row(dh, CBuf<T>(dqkv + n * QKV), normed);
    cpu::widen_row(x, inp + n * QKV, normed);
    qk_norm_dinp_row(dh, x, wq32, wk32, rstd + n * heads, NH, NKV, hs);
    cpu::narrow_row(dqkv + n * QKV, dh, normed);
  });
}

#define MPITRAIN_INSTANTIATE(T)                                                                \
  template void CpuBackend<T>::qk_norm_forward(Buf<T>, T*, CBuf<T>, CBuf<T>, CBuf<T>, int, int, \
                                               int, int, T);                                   \
  template void CpuBackend<T>::qk_norm_backward(Buf<T>, T*, T*, CBuf<T>, CBuf<T>, CBuf<T>,      \
                                                const T*, int, int, int, int);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
