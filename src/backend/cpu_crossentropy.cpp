// CPU backend: vocabulary-parallel softmax cross-entropy in three phases over this rank's
// logits(N, Vl) = columns [v0, v0 + Vl) of the padded vocabulary; global columns >= V are padding.
// Local column j is real iff j < R = clamp(V - v0, 0, Vl), so the real columns are a prefix.
//
// Per row n (m, Z, x_t are the global values the caller combined between the phases):
//   1) m_local = max_{j<R} x_j                    (-inf when R == 0)
//   2) Z_local = sum_{j<R} e^(x_j - m) (summed in double, stored as T); x_t if t is held, else 0
//   3) loss = log Z + m - x_t;  if dloss != 0:  x_j = e^(x_j - m) (dloss / Z) - [j == t] dloss
//      for j < R, 0 for R <= j < Vl. A row with target kUnscored: loss 0, x_j = 0 (its scale
//      dloss / Z taken as 0, its target held by no rank).
// Rows in parallel above a work threshold; every per-row result is computed by one thread in a
// fixed order and the returned total is summed over fixed row chunks, so all results are bitwise
// independent of the thread count. Each phase reads the row once (phase 3 only with a gradient),
// and e^x is the vectorised cpu::exp_fast for float.
//
// A row is read in pieces of kPiece columns, the sum of exponentials added piece by piece. 2-byte
// logits: each thread widens a piece into kPiece floats of scratch (L1: whole rows widened into
// L2 cost 1.5x the fp32 phases, a block of rows staged through memory 1.7x) and runs the same
// piece functions on it, the gradient rounded back into the row; fp32 logits are read and written
// in place in the same pieces, so both give the same bits. ce_loss's total is summed after the
// rows, over the same row chunks and from the same per-row values either way: the same double.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

namespace {
// The number of real (non-padding) columns among this rank's Vl columns starting at v0.
inline int real_columns(int Vl, int v0, int V) { return std::clamp(V - v0, 0, Vl); }

// The chunks ce_loss sums its total over depend on Vl only (not on dloss), so the total is the
// same with or without the gradient, and the same on every tensor-parallel rank (same Vl).
inline size_t loss_rows_per_chunk(int Vl) {
  return std::max<size_t>(1, cpu::kParallelWork / std::max(Vl, 1));
}

// Row n's loss from its (combined) max, sum of exponentials and target logit; 0 if unscored.
template <typename T>
inline double row_loss(const T* row_max, const T* stats, const int32_t* targets, int N, int n) {
  if (targets[n] == kUnscored) return 0.0;
  return std::log(static_cast<double>(stats[n])) + static_cast<double>(row_max[n]) -
         static_cast<double>(stats[N + n]);
}

// ---- one row's pieces, on T values --------------------------------------------------------
constexpr int kPiece = 2048;

template <typename T>
inline double sum_exp_of_piece(const T* x, T m, int n) {
  double z = 0.0;
#pragma omp simd reduction(+ : z)
  for (int j = 0; j < n; ++j) z += cpu::exp_fast(x[j] - m);
  return z;
}

// Columns [j0, j0 + n) of the row's gradient, in place: e^(x_j - m) s for the real columns
// (s = dloss / z), 0 in the padding, less dloss at the target t.
template <typename T>
inline void gradient_of_piece(T* x, int j0, int n, T m, T s, int t, int R, T dloss) {
  const int real = std::clamp(R - j0, 0, n);
#pragma omp simd
  for (int j = 0; j < real; ++j) x[j] = cpu::exp_fast(x[j] - m) * s;
  for (int j = real; j < n; ++j) x[j] = T(0);
  if (t >= j0 && t < j0 + real) x[t - j0] -= dloss;
}

// The per-thread pieces 2-byte logits are widened into (omp_get_max_threads() of kPiece), from
// the staging scratch; null for fp32 logits, which are read and written in place.
template <typename T>
T* staged_pieces(cpu::Staging& staging, CBuf<T> logits) {
  if (!cpu::staged(logits)) return nullptr;
  return staging.take<T>(cpu::kSlotA, static_cast<size_t>(omp_get_max_threads()) * kPiece);
}

// f(x, j0, n) over the pieces of columns [0, cols) of `row`, x the piece as T values: the row's
// own, or with `scratch` widened there and (for a Buf, which f writes) rounded back after f: the
// bits of the emulated path (the same piece functions on the same values).
template <typename T, class B, class F>
void for_pieces(B row, T* scratch, int cols, F&& f) {
  for (int j0 = 0; j0 < cols; j0 += kPiece) {
    const int n = std::min(kPiece, cols - j0);
    const B piece = row + j0;
    if (scratch == nullptr) {
      f(piece.full(), j0, n);
      continue;
    }
    cpu::widen_row(scratch, CBuf<T>(piece), n);
    f(scratch, j0, n);
    if constexpr (std::is_same_v<B, Buf<T>>) cpu::narrow_row(piece, scratch, n);
  }
}

// f(n, row, scratch) over the N rows, in parallel above `work`; scratch: this thread's piece of
// `pieces`, or null (fp32 logits).
template <typename T, class B, class F>
void for_rows(B logits, T* pieces, int N, int Vl, size_t work, F&& f) {
#pragma omp parallel for schedule(static) if (work > cpu::kParallelWork)
  for (int n = 0; n < N; ++n)
    f(n, logits + static_cast<size_t>(n) * Vl,
      pieces ? pieces + static_cast<size_t>(omp_get_thread_num()) * kPiece : nullptr);
}

}  // namespace

template <typename T>
void CpuBackend<T>::ce_row_max(CBuf<T> logits, T* row_max, int N, int Vl, int v0, int V) {
  const int R = real_columns(Vl, v0, V);
  for_rows(logits, staged_pieces(*staging_, logits), N, Vl, static_cast<size_t>(N) * R,
           [&](int n, CBuf<T> row, T* scratch) {
             T m = -std::numeric_limits<T>::infinity();
             for_pieces(row, scratch, R, [&](const T* x, int, int len) {
               const T piece = cpu::max_of(x, len);
               m = m > piece ? m : piece;
             });
             row_max[n] = m;
           });
}

template <typename T>
void CpuBackend<T>::ce_stats(CBuf<T> logits, const T* row_max, const int32_t* targets, T* stats,
                             int N, int Vl, int v0, int V) {
  const int R = real_columns(Vl, v0, V);
  for_rows(logits, staged_pieces(*staging_, logits), N, Vl, static_cast<size_t>(N) * R,
           [&](int n, CBuf<T> row, T* scratch) {
             double z = 0.0;
             for_pieces(row, scratch, R, [&](const T* x, int, int len) {
               z += sum_exp_of_piece(x, row_max[n], len);
             });
             stats[n] = static_cast<T>(z);
             const int t = targets[n] - v0;
             T target = T(0);
             if (t >= 0 && t < R) cpu::widen_row(&target, row + t, 1);
             stats[N + n] = target;
           });
}

// The total is summed over fixed row chunks of the per-row losses (the same double with or
// without the gradient, staged or not).
template <typename T>
double CpuBackend<T>::ce_loss(Buf<T> logits, const T* row_max, const T* stats,
                              const int32_t* targets, T* losses, int N, int Vl, int v0, int V,
                              T dloss) {
  const int R = real_columns(Vl, v0, V);
  for (int n = 0; n < N; ++n) losses[n] = static_cast<T>(row_loss(row_max, stats, targets, N, n));
  if (dloss != T(0)) {
    for_rows(logits, staged_pieces(*staging_, CBuf<T>(logits)), N, Vl, static_cast<size_t>(N) * Vl,
             [&](int n, Buf<T> row, T* scratch) {
               const T s = targets[n] == kUnscored
                               ? T(0)
                               : static_cast<T>(1.0 / static_cast<double>(stats[n])) * dloss;
               const int t = targets[n] - v0;
               if (scratch == nullptr)  // element-wise: in place the whole row is one piece
                 return gradient_of_piece(row.full(), 0, Vl, row_max[n], s, t, R, dloss);
               for_pieces(row, scratch, Vl, [&](T* x, int j0, int len) {
                 gradient_of_piece(x, j0, len, row_max[n], s, t, R, dloss);
               });
             });
  }
  return cpu::chunked_sum(N, loss_rows_per_chunk(Vl), [&](size_t n0, size_t n1) {
    double total = 0.0;
    for (size_t r = n0; r < n1; ++r)
      total += row_loss(row_max, stats, targets, N, static_cast<int>(r));
    return total;
  });
}

#define MPITRAIN_INSTANTIATE(T)                                                                    \
  template void CpuBackend<T>::ce_row_max(CBuf<T>, T*, int, int, int, int);                        \
  template void CpuBackend<T>::ce_stats(CBuf<T>, const T*, const int32_t*, T*, int, int, int,      \
                                        int);                                                      \
  template double CpuBackend<T>::ce_loss(Buf<T>, const T*, const T*, const int32_t*, T*, int, int, \
                                         int, int, T);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
