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
// 2-byte logits: blocks of rows staged (cpu_storage.hpp). ce_loss's total is then summed after
// the blocks, over the same row chunks and from the same per-row values as the fp32 kernel, so it
// is the same double.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

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

template <typename T>
void ce_row_max_kernel(const T* logits, T* row_max, int N, int Vl, int v0, int V) {
  const int R = real_columns(Vl, v0, V);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * R > cpu::kParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<size_t>(n) * Vl;
    T m = -std::numeric_limits<T>::infinity();
    // not std::max(m, x[j]): GCC leaves that form scalar. A NaN logit may be dropped here, but
    // e^(NaN - m) = NaN in phase 2 still makes the row's loss NaN.
#pragma omp simd reduction(max : m)
    for (int j = 0; j < R; ++j) m = m > x[j] ? m : x[j];
    row_max[n] = m;
  }
}

template <typename T>
void ce_stats_kernel(const T* logits, const T* row_max, const int32_t* targets, T* stats, int N,
                     int Vl, int v0, int V) {
  const int R = real_columns(Vl, v0, V);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(N) * R > cpu::kParallelWork)
  for (int n = 0; n < N; ++n) {
    const T* x = logits + static_cast<size_t>(n) * Vl;
    const T m = row_max[n];
    double z = 0.0;
#pragma omp simd reduction(+ : z)
    for (int j = 0; j < R; ++j) z += cpu::exp_fast(x[j] - m);
    stats[n] = static_cast<T>(z);
    const int t = targets[n] - v0;
    stats[N + n] = t >= 0 && t < R ? x[t] : T(0);
  }
}

template <typename T>
double ce_loss_kernel(T* logits, const T* row_max, const T* stats, const int32_t* targets,
                      T* losses, int N, int Vl, int v0, int V, T dloss) {
  const int R = real_columns(Vl, v0, V);
  const bool grad = dloss != T(0);
  return cpu::chunked_sum(N, loss_rows_per_chunk(Vl), [&](size_t n0, size_t n1) {
    double total = 0.0;
    for (size_t n = n0; n < n1; ++n) {
      const T m = row_max[n];
      const double z = static_cast<double>(stats[n]);
      const double loss = row_loss(m, stats[n], stats[N + n]);
      losses[n] = static_cast<T>(loss);
      total += loss;
      if (grad) {
        T* x = logits + n * Vl;
        const T s = static_cast<T>(1.0 / z) * dloss;
#pragma omp simd
        for (int j = 0; j < R; ++j) x[j] = cpu::exp_fast(x[j] - m) * s;
        for (int j = R; j < Vl; ++j) x[j] = T(0);
        const int t = targets[n] - v0;
        if (t >= 0 && t < R) x[t] -= dloss;
      }
    }
    return total;
  });
}

}  // namespace

template <typename T>
void CpuBackend<T>::ce_row_max(CBuf<T> logits, T* row_max, int N, int Vl, int v0, int V) {
  if (!cpu::staged(logits)) return ce_row_max_kernel(logits.full(), row_max, N, Vl, v0, V);
  cpu::for_row_blocks(N, Vl, [&](size_t n0, size_t rows) {
    ce_row_max_kernel(staging_->widened(cpu::kSlotA, logits + n0 * Vl, rows * Vl), row_max + n0,
                      static_cast<int>(rows), Vl, v0, V);
  });
}

// A block's stats come back as [sums (rows) | target logits (rows)] and go to their halves.
template <typename T>
void CpuBackend<T>::ce_stats(CBuf<T> logits, const T* row_max, const int32_t* targets, T* stats,
                             int N, int Vl, int v0, int V) {
  if (!cpu::staged(logits))
    return ce_stats_kernel(logits.full(), row_max, targets, stats, N, Vl, v0, V);
  cpu::for_row_blocks(N, Vl, [&](size_t n0, size_t rows) {
    T* st = staging_->take<T>(cpu::kSlotD, 2 * rows);
    ce_stats_kernel(staging_->widened(cpu::kSlotA, logits + n0 * Vl, rows * Vl), row_max + n0,
                    targets + n0, st, static_cast<int>(rows), Vl, v0, V);
    std::memcpy(stats + n0, st, rows * sizeof(T));
    std::memcpy(stats + N + n0, st + rows, rows * sizeof(T));
  });
}

// Without a gradient the logits are not read, so they are not widened.
template <typename T>
double CpuBackend<T>::ce_loss(Buf<T> logits, const T* row_max, const T* stats,
                              const int32_t* targets, T* losses, int N, int Vl, int v0, int V,
                              T dloss) {
  if (!cpu::staged(logits))
    return ce_loss_kernel(logits.full(), row_max, stats, targets, losses, N, Vl, v0, V, dloss);
  const bool grad = dloss != T(0);
  cpu::for_row_blocks(N, Vl, [&](size_t n0, size_t rows) {
    const size_t at = n0 * Vl, n = rows * Vl;
    T* x = grad ? staging_->take<T>(cpu::kSlotA, n) : nullptr;
    if (grad) cpu::widen(x, CBuf<T>(logits + at), n);
    T* st = staging_->take<T>(cpu::kSlotD, 2 * rows);
    std::memcpy(st, stats + n0, rows * sizeof(T));
    std::memcpy(st + rows, stats + N + n0, rows * sizeof(T));
    ce_loss_kernel(x, row_max + n0, st, targets + n0, losses + n0, static_cast<int>(rows), Vl, v0,
                   V, dloss);
    if (grad) cpu::narrow(logits + at, x, n);
  });
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
