// Private to the CPU backend: 2-byte compute tensors (bf16 / fp16 bits). An op on 2-byte tensors
// widens its inputs, a block of rows at a time, into fp32 scratch the backend owns (Staging), runs
// the fp32 kernel on the block and rounds the outputs into the 2-byte tensor (round to nearest
// even): the bits of the emulated path (fp32 containers holding the rounded values -> the same
// kernel -> round_to), with scratch bounded by a few MB, never a whole-tensor fp32 copy.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#ifdef __F16C__
#include <immintrin.h>
#endif
#include <omp.h>

#include "cpu_kernels.hpp"
#include "mpitrain/backend/buf.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain::cpu {

// A 64-byte aligned buffer that only grows; its contents are not kept when it does.
class ScratchBuffer {
 public:
  void* reserve(size_t bytes);  // at least `bytes`, reallocated only when larger than before
  size_t bytes() const { return bytes_; }  // held now: the largest reserve so far

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  size_t bytes_ = 0;
};

// Elements of one staged tensor block: 1 MiB of floats. A block holds at least 16 rows (or one
// whole sequence where an op needs them), so a single row larger than that still fits.
inline constexpr size_t kBlockElems = size_t{1} << 18;

// The scratch slots of the staged ops, one tensor each; kSlotTiles: attention's bf16 tile packs,
// a region per thread (cpu_attention.cpp).
enum Slot : int { kSlotA, kSlotB, kSlotC, kSlotD, kSlotWeight, kSlotBias, kSlotTiles, kSlots };

class Staging {
 public:
  template <typename T>
  T* take(Slot slot, size_t n) {
    return static_cast<T*>(slots_[slot].reserve(n * sizeof(T)));
  }
  // src's n elements as T: src itself when it is Fp32 (or null), else widened into the slot.
  template <typename T>
  const T* widened(Slot slot, CBuf<T> src, size_t n);
  size_t bytes() const;  // held now by all slots

 private:
  ScratchBuffer slots_[kSlots];
};

// fp16 <-> float over n elements, on the calling thread: F16C's conversions 8 at a time where
// the build has them (-march=native: every x86-64 CPU since 2013), the scalar ones of
// precision.hpp elsewhere and for the tail. The bits are the scalar ones': round to nearest
// even, subnormals kept, overflow to inf; a block holding a NaN is left to the scalar code, so
// a NaN is the same quiet NaN (F16C would keep its payload).
inline void fp16_to_float(float* dst, const uint16_t* h, size_t n) {
  size_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
#endif
  for (; i < n; ++i) dst[i] = from_fp16_bits(h[i]);
}
inline void float_to_fp16(uint16_t* h, const float* src, size_t n) {
  size_t i = 0;
#ifdef __F16C__
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (size_t j = i; j < i + 8; ++j) h[j] = to_fp16_bits(src[j]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) h[i] = to_fp16_bits(src[i]);
}

// f(std::integral_constant<Precision, P>()) with P the 2-byte type `dtype` (Bf16 or Fp16): loops
// over short pieces written once for both types, with each piece's conversion inlined (a call per
// 64-column piece ran the bf16 LayerNorm's weight gradients at half of fp32's speed).
template <class F>
void with_half_type(Precision dtype, F&& f) {
  if (dtype == Precision::Bf16)
    f(std::integral_constant<Precision, Precision::Bf16>());
  else
    f(std::integral_constant<Precision, Precision::Fp16>());
}

// One element: bf16 bits as T (exact), and T rounded to bf16 bits (through float, as round_to
// rounds a double), for loops that convert inside their vector body.
template <typename T>
inline T bf16_value(uint16_t bits) {
  return static_cast<T>(from_bf16_bits(bits));
}
template <typename T>
inline uint16_t bf16_bits(T x) {
  return to_bf16_bits(static_cast<float>(x));
}

// dst[0, n) = the n elements h, bits of the 2-byte type P (Bf16 or Fp16), as T (exact), on the
// calling thread.
template <Precision P, typename T>
inline void widen_bits(T* dst, const uint16_t* h, size_t n) {
  if constexpr (P == Precision::Bf16) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) dst[i] = bf16_value<T>(h[i]);
  } else if constexpr (std::is_same_v<T, float>) {
    fp16_to_float(dst, h, n);
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = static_cast<T>(from_fp16_bits(h[i]));
  }
}

// dst[0, n) = src's elements as T (exact), on the calling thread.
template <typename T>
void widen_row(T* dst, CBuf<T> src, size_t n) {
  if (const T* s = src.full())
    std::memcpy(dst, s, n * sizeof(T));
  else
    with_half_type(src.dtype(), [&](auto P) { widen_bits<P()>(dst, src.half(), n); });
}

// h[0, n) = src[0, n) rounded to bits of the 2-byte type P (T = double rounds through float, as
// CpuBackend<double>::round_to does), on the calling thread.
template <Precision P, typename T>
inline void narrow_bits(uint16_t* h, const T* src, size_t n) {
  if constexpr (P == Precision::Bf16) {
#pragma omp simd
    for (size_t i = 0; i < n; ++i) h[i] = bf16_bits(src[i]);
  } else if constexpr (std::is_same_v<T, float>) {
    float_to_fp16(h, src, n);
  } else {
    for (size_t i = 0; i < n; ++i) h[i] = to_fp16_bits(static_cast<float>(src[i]));
  }
}

// dst[0, n) = src rounded to dst's type, on the calling thread.
template <typename T>
void narrow_row(Buf<T> dst, const T* src, size_t n) {
  if (T* d = dst.full())
    std::memcpy(d, src, n * sizeof(T));
  else
    with_half_type(dst.dtype(), [&](auto P) { narrow_bits<P()>(dst.half(), src, n); });
}

// The same over n elements, in parallel chunks when n is large.
template <typename T>
void widen(T* dst, CBuf<T> src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 4 * kParallelWork)
  for (size_t i = 0; i < n; i += kParallelWork)
    widen_row(dst + i, src + i, std::min(kParallelWork, n - i));
}
template <typename T>
void narrow(Buf<T> dst, const T* src, size_t n) {
#pragma omp parallel for schedule(static) if (n > 4 * kParallelWork)
  for (size_t i = 0; i < n; i += kParallelWork)
    narrow_row(dst + i, src + i, std::min(kParallelWork, n - i));
}

// dst (rows r0..r1, dst_ld apart) = columns [c0, c1) of those rows of the row-major matrix src
// with ld columns, as T; narrow_block writes such a block (rows src_ld apart) back, rounded.
template <typename T>
void widen_block(T* dst, size_t dst_ld, CBuf<T> src, size_t ld, size_t r0, size_t r1, size_t c0,
                 size_t c1) {
  const size_t w = c1 - c0;
#pragma omp parallel for schedule(static) if ((r1 - r0) * w > 4 * kParallelWork)
  for (size_t r = r0; r < r1; ++r) widen_row(dst + (r - r0) * dst_ld, src + (r * ld + c0), w);
}
template <typename T>
void narrow_block(Buf<T> dst, size_t ld, size_t r0, size_t r1, size_t c0, size_t c1, const T* src,
                  size_t src_ld) {
  const size_t w = c1 - c0;
#pragma omp parallel for schedule(static) if ((r1 - r0) * w > 4 * kParallelWork)
  for (size_t r = r0; r < r1; ++r) narrow_row(dst + (r * ld + c0), src + (r - r0) * src_ld, w);
}

template <typename T>
const T* Staging::widened(Slot slot, CBuf<T> src, size_t n) {
  if (!src || src.full()) return src.full();
  T* dst = take<T>(slot, n);
  widen(dst, src, n);
  return dst;
}

// Whether an op runs staged: its compute tensors (null ones aside) are 2-byte. They must all be
// of one storage type (backend.hpp); Error otherwise.
[[noreturn]] void throw_mixed_storage();
template <typename... B>
bool staged(const B&... bufs) {
  bool half = false, full = false;
  const auto see = [&](bool present, Precision dtype) {
    if (present) (dtype == Precision::Fp32 ? full : half) = true;
  };
  (see(static_cast<bool>(bufs), bufs.dtype()), ...);
  if (half && full) throw_mixed_storage();
  return half;
}

// f(first, count) over blocks of [0, rows) rows of row_elems elements: as many rows as fit
// kBlockElems, a multiple of 16 (each block then starts at the same 64-byte alignment in the
// scratch as in the tensor, for any row size), at least 16.
template <class F>
void for_row_blocks(size_t rows, size_t row_elems, F&& f) {
  const size_t per = std::max<size_t>(16, kBlockElems / std::max<size_t>(row_elems, 1) / 16 * 16);
  for (size_t r = 0; r < rows; r += per) f(r, std::min(per, rows - r));
}

// Per-thread fp32 rows for an op that widens a 2-byte row, runs the fp32 row kernel on it and
// rounds the output straight into the 2-byte tensor, a row at a time in L1 (blocks of rows staged
// through memory made the norms 2.5x slower than on fp32). `count` arrays of C elements a thread,
// taken from one slot before the parallel loop; row(k, n) places the calling thread's array k at
// the 64-byte alignment row n of a C-wide fp32 tensor has, so the kernel's vectorised sums group
// as they do on the emulated path's fp32 tensor even where a compiler peels a loop to align it
// (GCC 12 here does not, so CpuStorage.Norms passes without the placement too).
template <typename T>
class ThreadRows {
 public:
  ThreadRows(Staging& staging, Slot slot, int count, size_t C)
      : count_(count),
        C_(C),
        stride_(stride(C)),
        base_(staging.take<T>(slot, elements(count, C))) {}
  // the elements of the slot they take
  static size_t elements(int count, size_t C) {
    return static_cast<size_t>(omp_get_max_threads()) * count * stride(C);
  }
  T* row(int k, size_t n) const {
    return base_ + (static_cast<size_t>(omp_get_thread_num()) * count_ + k) * stride_ +
           n * C_ % kAlign;
  }

 private:
  static constexpr size_t kAlign = 64 / sizeof(T);
  static size_t stride(size_t C) { return (C + 2 * kAlign - 1) / kAlign * kAlign; }
  int count_;
  size_t C_, stride_;
  T* base_;
};

// A row-wise op's rows: f(o, x, n) on rows n of out and inp (C elements each) in place, or on
// the thread's fp32 copy of a 2-byte row of inp (ThreadRows), its output row rounded into out.
template <typename T, class F>
void for_forward_rows(Staging& staging, Buf<T> out, CBuf<T> inp, int N, int C, F&& f) {
  if (T* o = out.full()) {
    const T* x = inp.full();
    return for_rows(N, C, [&](size_t n) { f(o + n * C, x + n * C, n); });
  }
  const ThreadRows<T> rows(staging, kSlotA, 2, C);
  for_rows(N, C, [&](size_t n) {
    T *x = rows.row(0, n), *o = rows.row(1, n);
    widen_row(x, inp + n * C, C);
    f(o, x, n);
    narrow_row(out + n * C, o, C);
  });
}

// The same over whole sequences (B of them, seq_elems elements each), at least one per block.
template <class F>
void for_sequence_blocks(int B, size_t seq_elems, F&& f) {
  const int per =
      static_cast<int>(std::max<size_t>(1, kBlockElems / std::max<size_t>(seq_elems, 1)));
  for (int b = 0; b < B; b += per) f(b, std::min(per, B - b));
}

// for_row_pieces on tensors stored as P (Fp32: read in place), each piece's widening inlined.
template <Precision P, typename T, class F>
void row_pieces_of(CBuf<T> a, CBuf<T> b, int N, int C, F&& f) {
  const T *a32 = a.full(), *b32 = b.full();
  const uint16_t *a16 = a.half(), *b16 = b.half();
  for_column_blocks(C, N, [&](int c0, int c1) {
    alignas(64) T ap[kColumnBlock], bp[kColumnBlock];
    const int width = c1 - c0;
    for (int n = 0; n < N; ++n) {
      const size_t at = static_cast<size_t>(n) * C + c0;
      if constexpr (P == Precision::Fp32) {
        f(c0, width, a32 + at, b32 ? b32 + at : nullptr, static_cast<size_t>(n));
      } else {
        widen_bits<P>(ap, a16 + at, width);
        if (b16) widen_bits<P>(bp, b16 + at, width);
        f(c0, width, ap, b16 ? bp : nullptr, static_cast<size_t>(n));
      }
    }
  });
}

// f(c0, width, d, x, n) for each column block [c0, c0 + width) and row n in order (the sums over
// rows: norm weights, biases): d and x the row's pieces of a and b as T, read in place where they
// are fp32, widened on the fly into the thread's arrays where they are 2-byte; b may be null
// (x then null), else stored as a is.
template <typename T, class F>
void for_row_pieces(CBuf<T> a, CBuf<T> b, int N, int C, F&& f) {
  if (a.full()) return row_pieces_of<Precision::Fp32>(a, b, N, C, f);
  with_half_type(a.dtype(), [&](auto P) { row_pieces_of<P()>(a, b, N, C, f); });
}

}  // namespace mpitrain::cpu
