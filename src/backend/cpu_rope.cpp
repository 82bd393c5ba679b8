// CPU backend: rotary position embedding, in place on the q and k heads of qkv(B,T,QKV). On
// 2-byte tensors: whole sequences at a time staged (cpu_storage.hpp; v round-trips exactly).
#include <cmath>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr int kMaxHeadSize = 1024;

// Rotates pair (2i, 2i+1) of every q and k head at position t by sign * t rope.inv_freq(i, hs):
//   (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)   (Meta's x * freqs_cis in complex form)
// sign = -1 is the inverse rotation, i.e. the transpose: rope's backward.
template <typename T>
void rope_rotate(T* qkv, int B, int Tlen, int NH, int NKV, int hs, const RopeFreqs& rope,
                 double sign) {
  if (hs % 2 != 0 || hs > kMaxHeadSize)
    MPITRAIN_THROW("rope: head size must be even and at most " + std::to_string(kMaxHeadSize));
  const int half = hs / 2, rot_heads = NH + NKV;  // q heads then k heads are contiguous
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
#pragma omp parallel for schedule(static) \
    if (static_cast<size_t>(B) * Tlen * rot_heads * hs > cpu::kParallelWork)
  for (int t = 0; t < Tlen; ++t) {
    T cs[kMaxHeadSize / 2], sn[kMaxHeadSize / 2];
    for (int i = 0; i < half; ++i) {  // angle in double: t * freq is large for long sequences
      const double angle = sign * (rope.first_position + t) * rope.inv_freq(i, hs);
      cs[i] = static_cast<T>(std::cos(angle));
      sn[i] = static_cast<T>(std::sin(angle));
    }
    for (int b = 0; b < B; ++b) {
      T* row = qkv + (static_cast<size_t>(b) * Tlen + t) * QKV;
      for (int h = 0; h < rot_heads; ++h) {
        T* x = row + static_cast<size_t>(h) * hs;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
          const T x0 = x[2 * i], x1 = x[2 * i + 1];
          x[2 * i] = x0 * cs[i] - x1 * sn[i];
          x[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
        }
      }
    }
  }
}

// rope_rotate on qkv of any storage type: 2-byte sequences through fp32 scratch.
template <typename T>
void rope_any(cpu::Staging& staging, Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
              const RopeFreqs& rope, double sign) {
  if (!cpu::staged(qkv)) return rope_rotate(qkv.full(), B, Tlen, NH, NKV, hs, rope, sign);
  const size_t seq = static_cast<size_t>(Tlen) * (NH + 2 * NKV) * hs;
  cpu::for_sequence_blocks(B, seq, [&](int b0, int nb) {
    T* x = staging.take<T>(cpu::kSlotA, nb * seq);
    cpu::widen(x, CBuf<T>(qkv + b0 * seq), nb * seq);
    rope_rotate(x, nb, Tlen, NH, NKV, hs, rope, sign);
    cpu::narrow(qkv + b0 * seq, x, nb * seq);
  });
}

}  // namespace

template <typename T>
void CpuBackend<T>::rope_forward(Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
                                 const RopeFreqs& rope) {
  rope_any(*staging_, qkv, B, Tlen, NH, NKV, hs, rope, +1.0);
}

// the rotation is orthogonal: its backward is the inverse rotation of dq, dk (dv untouched)
template <typename T>
void CpuBackend<T>::rope_backward(Buf<T> dqkv, int B, int Tlen, int NH, int NKV, int hs,
                                  const RopeFreqs& rope) {
  rope_any(*staging_, dqkv, B, Tlen, NH, NKV, hs, rope, -1.0);
}

#define MPITRAIN_INSTANTIATE(T)                                                                 \
  template void CpuBackend<T>::rope_forward(Buf<T>, int, int, int, int, int, const RopeFreqs&); \
  template void CpuBackend<T>::rope_backward(Buf<T>, int, int, int, int, int, const RopeFreqs&);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
