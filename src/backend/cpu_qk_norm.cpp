// CPU backend: per-head q/k RMSNorm (qk_norm) on qkv(N,(NH+2NKV)*hs): each of a row's NH q heads
// and NKV k heads is normalized over its hs values and scaled by wq / wk (shared by the heads); v
// passes through. Rows in parallel; the weight gradients (sums over rows and heads) in parallel
// over columns, so there are no races and no scratch. On 2-byte tensors: blocks of rows staged
// (cpu_storage.hpp), the weight gradients taking the blocks in order (the same sums, in order).
#include <algorithm>
#include <cmath>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::kParallelWork;

namespace {

// per row n, head h (q heads first, then k): rstd = 1/sqrt(sum x^2 / hs + eps); out = x rstd w
template <typename T>
void qk_norm_forward_kernel(T* out, T* rstd, const T* inp, const T* wq, const T* wk, int N, int NH,
                            int NKV, int hs, T eps) {
  const int heads = NH + NKV;
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
  const size_t normed = static_cast<size_t>(heads) * hs;  // the q and k heads; v after them
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * QKV > kParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* row = inp + n * QKV;
    T* orow = out + n * QKV;
    for (int h = 0; h < heads; ++h) {
      const T* x = row + static_cast<size_t>(h) * hs;
      const T* w = h < NH ? wq : wk;
      rstd[static_cast<size_t>(n) * heads + h] =
          cpu::rmsnorm_row(orow + static_cast<size_t>(h) * hs, x, w, hs, eps);
    }
    std::copy(row + normed, row + QKV, orow + normed);  // v
  }
}

// Columns of the weight gradients' sums a task takes: one cache line of floats.
constexpr int kPiece = 16;

// norm = x rstd; dw += sum over rows and heads of dout norm (first, while d holds dout); then in
// place d = rstd (dout w - norm mean(dout w norm)) per head. The sums run per column over the rows
// in order and each row's heads in order, in parallel over pieces of kPiece columns, each row's
// heads read a piece at a time (a column at a time over all rows read 4 bytes a cache line).
template <typename T>
void qk_norm_backward_kernel(T* d, T* dwq, T* dwk, const T* inp, const T* wq, const T* wk,
                             const T* rstd, int N, int NH, int NKV, int hs) {
  const int heads = NH + NKV;
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * QKV > kParallelWork)
  for (int c0 = 0; c0 < hs; c0 += kPiece) {
    const int width = std::min(kPiece, hs - c0);
    T sq[kPiece], sk[kPiece];  // summed onto the gradient: a staged call's blocks add in order
    std::copy_n(dwq + c0, width, sq);
    std::copy_n(dwk + c0, width, sk);
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < heads; ++h) {
        const size_t i = n * QKV + static_cast<size_t>(h) * hs + c0;
        const T r = rstd[static_cast<size_t>(n) * heads + h];
        T* s = h < NH ? sq : sk;
#pragma omp simd
        for (int c = 0; c < width; ++c) s[c] += d[i + c] * inp[i + c] * r;
      }
    std::copy_n(sq, width, dwq + c0);
    std::copy_n(sk, width, dwk + c0);
  }
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * QKV > kParallelWork)
  for (int n = 0; n < N; ++n)
    for (int h = 0; h < heads; ++h) {
      const size_t at = n * QKV + static_cast<size_t>(h) * hs;
      const T* x = inp + at;
      const T* w = h < NH ? wq : wk;
      T* dh = d + at;
      const T r = rstd[static_cast<size_t>(n) * heads + h];
      T dnn_mean = 0;
#pragma omp simd reduction(+ : dnn_mean)
      for (int c = 0; c < hs; ++c) dnn_mean += dh[c] * w[c] * x[c] * r;
      dnn_mean /= hs;
#pragma omp simd
      for (int c = 0; c < hs; ++c) dh[c] = r * (dh[c] * w[c] - x[c] * r * dnn_mean);
    }
}

}  // namespace

template <typename T>
void CpuBackend<T>::qk_norm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk,
                                    int N, int NH, int NKV, int hs, T eps) {
  if (!cpu::staged(out, inp, wq, wk))
    return qk_norm_forward_kernel(out.full(), rstd, inp.full(), wq.full(), wk.full(), N, NH, NKV,
                                  hs, eps);
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs, heads = NH + NKV;
  const T* wq32 = staging_->widened(cpu::kSlotWeight, wq, hs);
  const T* wk32 = staging_->widened(cpu::kSlotBias, wk, hs);
  cpu::for_row_blocks(N, QKV, [&](size_t n0, size_t rows) {
    const size_t at = n0 * QKV, n = rows * QKV;
    T* o = staging_->take<T>(cpu::kSlotC, n);
    qk_norm_forward_kernel(o, rstd + n0 * heads, staging_->widened(cpu::kSlotA, inp + at, n), wq32,
                           wk32, static_cast<int>(rows), NH, NKV, hs, eps);
    cpu::narrow(out + at, o, n);
  });
}

template <typename T>
void CpuBackend<T>::qk_norm_backward(Buf<T> dqkv, T* dwq, T* dwk, CBuf<T> inp, CBuf<T> wq,
                                     CBuf<T> wk, const T* rstd, int N, int NH, int NKV, int hs) {
  if (!cpu::staged(dqkv, inp, wq, wk))
    return qk_norm_backward_kernel(dqkv.full(), dwq, dwk, inp.full(), wq.full(), wk.full(), rstd,
                                   N, NH, NKV, hs);
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs, heads = NH + NKV;
  const T* wq32 = staging_->widened(cpu::kSlotWeight, wq, hs);
  const T* wk32 = staging_->widened(cpu::kSlotBias, wk, hs);
  cpu::for_row_blocks(N, QKV, [&](size_t n0, size_t rows) {
    const size_t at = n0 * QKV, n = rows * QKV;
    T* d = staging_->take<T>(cpu::kSlotC, n);
    cpu::widen(d, CBuf<T>(dqkv + at), n);
    qk_norm_backward_kernel(d, dwq, dwk, staging_->widened(cpu::kSlotA, inp + at, n), wq32, wk32,
                            rstd + n0 * heads, static_cast<int>(rows), NH, NKV, hs);
    cpu::narrow(dqkv + at, d, n);
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
