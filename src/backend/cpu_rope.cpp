// CPU backend: rotary position embedding, in place on the q and k heads of qkv(B,T,QKV). On
// 2-byte tensors a row's q and k heads at a time, widened into the thread's own array (L1).
#include <cmath>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr int kMaxHeadSize = 1024;

// Rotates pair (2i, 2i+1) of each of `heads` heads of hs elements at x by the angles whose
// cosines and sines are cs, sn (half = hs / 2 of each):
//   (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)   (Meta's x * freqs_cis in complex form)
template <typename T>
inline void rotate_heads(T* x, int heads, int hs, const T* cs, const T* sn) {
  for (int h = 0; h < heads; ++h, x += hs) {
#pragma omp simd
    for (int i = 0; i < hs / 2; ++i) {
      const T x0 = x[2 * i], x1 = x[2 * i + 1];
      x[2 * i] = x0 * cs[i] - x1 * sn[i];
      x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
    }
  }
}

// Rotates every q and k head of qkv(B, T, QKV) at position t by sign * t rope.inv_freq(i, hs)
// and multiplies it by rope.attention_factor(); sign = -1 is the inverse rotation, i.e. the
// transpose: rope's backward (the factor is symmetric). The frequencies once per call; in
// parallel over t (the angles once per position); on 2-byte tensors each row's q and k heads are
// widened into the thread's own array, rotated and rounded back (v is not touched).
template <typename T>
void rope_rotate(cpu::Staging& staging, Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
                 const RopeFreqs& rope, double sign) {
  if (hs % 2 != 0 || hs > kMaxHeadSize)
    MPITRAIN_THROW("rope: head size must be even and at most " + std::to_string(kMaxHeadSize));
  const int half = hs / 2, rot_heads = NH + NKV;  // q heads then k heads are contiguous
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
  const size_t rot = static_cast<size_t>(rot_heads) * hs;  // a row's q and k heads
  const bool staged = cpu::staged(qkv);
  const cpu::ThreadRows<T> rows(staging, cpu::kSlotA, staged ? 1 : 0, rot);
  double freq[kMaxHeadSize / 2];  // the scaled frequencies: the same at every position
  for (int i = 0; i < half; ++i) freq[i] = rope.inv_freq(i, hs);
  const double scale = rope.attention_factor();
#pragma omp parallel for schedule(static) \
    if (static_cast<size_t>(B) * Tlen * rot > cpu::kParallelWork)
  for (int t = 0; t < Tlen; ++t) {
    T cs[kMaxHeadSize / 2], sn[kMaxHeadSize / 2];
    for (int i = 0; i < half; ++i) {  // angle in double: t * freq is large for long sequences
      const double angle = sign * (rope.first_position + t) * freq[i];
      cs[i] = static_cast<T>(std::cos(angle) * scale);
      sn[i] = static_cast<T>(std::sin(angle) * scale);
    }
    for (int b = 0; b < B; ++b) {
      const Buf<T> row = qkv + (static_cast<size_t>(b) * Tlen + t) * QKV;
      if (!staged) {
        rotate_heads(row.full(), rot_heads, hs, cs, sn);
        continue;
      }
      T* x = rows.row(0, 0);
      cpu::widen_row(x, CBuf<T>(row), rot);
      rotate_heads(x, rot_heads, hs, cs, sn);
      cpu::narrow_row(row, x, rot);
    }
  }
}

}  // namespace

template <typename T>
void CpuBackend<T>::rope_forward(Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
                                 const RopeFreqs& rope) {
  rope_rotate(*staging_, qkv, B, Tlen, NH, NKV, hs, rope, +1.0);
}

// the rotation is orthogonal: its backward is the inverse rotation of dq, dk, times the same
// factor (dv untouched)
template <typename T>
void CpuBackend<T>::rope_backward(Buf<T> dqkv, int B, int Tlen, int NH, int NKV, int hs,
                                  const RopeFreqs& rope) {
  rope_rotate(*staging_, dqkv, B, Tlen, NH, NKV, hs, rope, -1.0);
}

#define MPITRAIN_INSTANTIATE(T)                                                                 \
  template void CpuBackend<T>::rope_forward(Buf<T>, int, int, int, int, int, const RopeFreqs&); \
  template void CpuBackend<T>::rope_backward(Buf<T>, int, int, int, int, int, const RopeFreqs&);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
