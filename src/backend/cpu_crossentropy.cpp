// CPU backend: fused softmax + cross-entropy over logits(N, Vp), columns >= V padding.
#include <cmath>

#include "cpu_kernels.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

// per row: m = max_{j<V} x_j;  Z = sum_{j<V} e^(x_j - m) (in double);  loss = log Z + m - x_target
// if dloss != 0: x_j = (e^(x_j - m) / Z - [j == target]) dloss for j < V, 0 for V <= j < Vp.
// Rows in parallel; the total is summed over fixed row chunks (independent of thread count).
template <typename T>
double CpuBackend<T>::crossentropy(T* logits, T* losses, const int32_t* targets, int N, int V,
                                   int Vp, T dloss) {
  const bool grad = dloss != T(0);
  const size_t rows_per_chunk = std::max<size_t>(1, cpu::kParallelWork / static_cast<size_t>(Vp));
  return cpu::chunked_sum(N, rows_per_chunk, [&](size_t n0, size_t n1) {
    double total = 0.0;
    for (size_t n = n0; n < n1; ++n) {
      T* x = logits + n * Vp;
      const int target = targets[n];
      const T xt = x[target];
      T m = x[0];
#pragma omp simd reduction(max : m)
      for (int j = 0; j < V; ++j) m = std::max(m, x[j]);
      double z = 0.0;
      if (grad) {
#pragma omp simd reduction(+ : z)
        for (int j = 0; j < V; ++j) {
          x[j] = cpu::exp_fast(x[j] - m);
          z += x[j];
        }
        const T s = static_cast<T>(1.0 / z) * dloss;
#pragma omp simd
        for (int j = 0; j < V; ++j) x[j] *= s;
        x[target] -= dloss;
        for (int j = V; j < Vp; ++j) x[j] = T(0);
      } else {
#pragma omp simd reduction(+ : z)
        for (int j = 0; j < V; ++j) z += cpu::exp_fast(x[j] - m);
      }
      const double loss = std::log(z) + static_cast<double>(m) - static_cast<double>(xt);
      losses[n] = static_cast<T>(loss);
      total += loss;
    }
    return total;
  });
}

template double CpuBackend<float>::crossentropy(float*, float*, const int32_t*, int, int, int,
                                                float);
template double CpuBackend<double>::crossentropy(double*, double*, const int32_t*, int, int, int,
                                                 double);

}  // namespace mpitrain
