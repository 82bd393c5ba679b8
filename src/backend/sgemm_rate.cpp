#include "mpitrain/backend/sgemm_rate.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "cpu_kernels.hpp"

namespace mpitrain {

double measure_sgemm_gflops(int n, int repeats, SgemmLibrary library) {
  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn, 0.0f);
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    if (library == SgemmLibrary::Backend)
      cpu::gemm(CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                c.data(), n);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(),
                  n, 0.0f, c.data(), n);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);  // r == 0 warms caches and threads
  }
  return 2.0 * n * nn / best / 1e9;
}

}  // namespace mpitrain
