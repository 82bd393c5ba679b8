// CPU backend: vocabulary-parallel softmax cross-entropy in three phases over this rank's
// logits(N, Vl) = columns [v0, v0 + Vl) of the padded vocabulary; global columns >= V are padding.
// Local column j is real iff j < R = clamp(V - v0, 0, Vl), so the real columns are a prefix.
//
// Per row n (m, Z, x_t are the global values the caller combined between the phases):
//   1) m_local = max_{j<R} x_j                    (-inf when R == 0)
//   2) Z_local = sum_{j<R} e^(x_j - m) (summed in double, stored as T); x_t if t is held, else 0
//   3) loss = log Z + m - x_t;  if dloss != 0:  x_j = e^(x_j - m) (dloss / Z) - [j == t] dloss
//      for j < R, 0 for R <= j < Vl.
// Rows in parallel above a work threshold; every per-row result is computed by one thread in a
// fixed order and the returned total is summed over fixed row chunks, so all results are bitwise
// independent of the thread count. Each phase reads the row once (phase 3 only with a gradient),
// and e^x is the vectorised cpu::exp_fast for float.
//
// 2-byte logits: each thread widens its row into a row of fp32 scratch (in cache: a block of rows
// staged through memory cost 1.7x the fp32 phases) and runs the same row functions on it, the
// gradient rounded back into the row. ce_loss's total is summed after the rows, over the same row
// chunks and from the same per-row values either way, so it is the same double.
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

// A row's loss from its (combined) max, sum of exponentials and target logit.
template <typename T>
inline double row_loss(T m, T z, T target_logit) {
  return std::log(static_cast<double>(z)) + static_cast<double>(m) -
         static_cast<double>(target_logit);
}

// ---- one row's pieces, on T values --------------------------------------------------------
template <typename T>
inline T max_of_row(const T* x, int R) {
  T m = -std::numeric_limits<T>::infinity();
  // not std::max(m, x[j]): GCC leaves that form scalar. A NaN logit may be dropped here, but
  // e^(NaN - m) = NaN in phase 2 still makes the row's loss NaN.
#pragma omp simd reduction(max : m)
  for (int j = 0; j < R; ++j) m = m > x[j] ? m : x[j];
  return m;
}

template <typename T>
inline double row_sum_exp(const T* x, T m, int R) {
  double z = 0.0;
#pragma omp simd reduction(+ : z)
  for (int j = 0; j < R; ++j) z += cpu::exp_fast(x[j] - m);
  return z;
}

// x = the row's gradient: e^(x_j - m) (dloss / z) - [j == t] dloss, 0 in the padding.
template <typename T>
inline void row_gradient(T* x, T m, double z, int t, int R, int Vl, T dloss) {
  const T s = static_cast<T>(1.0 / z) * dloss;
#pragma omp simd
  for (int j = 0; j < R; ++j) x[j] = cpu::exp_fast(x[j] - m) * s;
  for (int j = R; j < Vl; ++j) x[j] = T(0);
  if (t >= 0 && t < R) x[t] -= dloss;
}

// The per-thread rows 2-byte logits are widened into (omp_get_max_threads() rows of Vl), from
// the staging scratch; null for fp32 logits, which are read and written in place.
template <typename T>
T* staged_rows(cpu::Staging& staging, CBuf<T> logits, int Vl) {
  if (!cpu::staged(logits)) return nullptr;
  return staging.take<T>(cpu::kSlotA, static_cast<size_t>(omp_get_max_threads()) * Vl);
}

// f(n, x) over the N rows, in parallel above `work`; x: row n as T values, the row itself, or
// with `rows`, widened into this thread's row there and (for a Buf, which f writes) rounded back
// after f: the bits of the emulated path (the same row functions on the same values).
template <typename T, class B, class F>
void for_rows(B logits, T* rows, int N, int Vl, size_t work, F&& f) {
  const size_t row = static_cast<size_t>(Vl);
#pragma omp parallel for schedule(static) if (work > cpu::kParallelWork)
  for (int n = 0; n < N; ++n) {
    const B src = logits + n * row;
    if (rows == nullptr) {
      f(n, src.full());
      continue;
    }
    T* x = rows + static_cast<size_t>(omp_get_thread_num()) * row;
    cpu::widen_row(x, CBuf<T>(src), row);
    f(n, x);
    if constexpr (std::is_same_v<B, Buf<T>>) cpu::narrow_row(src, x, row);
  }
}

}  // namespace

template <typename T>
void CpuBackend<T>::ce_row_max(CBuf<T> logits, T* row_max, int N, int Vl, int v0, int V) {
  const int R = real_columns(Vl, v0, V);
  for_rows(logits, staged_rows(*staging_, logits, Vl), N, Vl, static_cast<size_t>(N) * R,
           [&](int n, const T* x) { row_max[n] = max_of_row(x, R); });
}

template <typename T>
void CpuBackend<T>::ce_stats(CBuf<T> logits, const T* row_max, const int32_t* targets, T* stats,
                             int N, int Vl, int v0, int V) {
  const int R = real_columns(Vl, v0, V);
  for_rows(logits, staged_rows(*staging_, logits, Vl), N, Vl, static_cast<size_t>(N) * R,
           [&](int n, const T* x) {
             stats[n] = static_cast<T>(row_sum_exp(x, row_max[n], R));
             const int t = targets[n] - v0;
             stats[N + n] = t >= 0 && t < R ? x[t] : T(0);
           });
}

// The total is summed over fixed row chunks of the per-row losses (the same double with or
// without the gradient, staged or not).
template <typename T>
double CpuBackend<T>::ce_loss(Buf<T> logits, const T* row_max, const T* stats,
                              const int32_t* targets, T* losses, int N, int Vl, int v0, int V,
                              T dloss) {
  const int R = real_columns(Vl, v0, V);
  for (int n = 0; n < N; ++n)
    losses[n] = static_cast<T>(row_loss(row_max[n], stats[n], stats[N + n]));
  if (dloss != T(0)) {
    for_rows(logits, staged_rows(*staging_, CBuf<T>(logits), Vl), N, Vl,
             static_cast<size_t>(N) * Vl, [&](int n, T* x) {
               row_gradient(x, row_max[n], static_cast<double>(stats[n]), targets[n] - v0, R, Vl,
                            dloss);
             });
  }
  return cpu::chunked_sum(N, loss_rows_per_chunk(Vl), [&](size_t n0, size_t n1) {
    double total = 0.0;
    for (size_t r = n0; r < n1; ++r) total += row_loss(row_max[r], stats[r], stats[N + r]);
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
