#include "mpitrain/backend/sgemm_rate.hpp"

#include <time.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "cpu_kernels.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// CPU seconds of every thread of this process so far.
double process_cpu_seconds() {
  timespec t{};
  if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) != 0)
    MPITRAIN_THROW(std::string("clock_gettime(CLOCK_PROCESS_CPUTIME_ID): ") + std::strerror(errno));
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

std::vector<SgemmTrial> time_product_trials(int n, int trials,
                                            const std::function<void()>& multiply,
                                            const std::function<void()>& between) {
  const double flops = 2.0 * n * static_cast<double>(n) * n;
  std::vector<SgemmTrial> out;
  for (int r = 0; r <= trials; ++r) {  // r == 0 warms caches and threads
    const double cpu0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    multiply();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = process_cpu_seconds() - cpu0;
    if (r == 0) continue;
    out.push_back({flops / wall / 1e9, wall, cpu});
    if (between) between();
  }
  return out;
}

std::vector<SgemmTrial> time_sgemm_trials(int n, int trials, SgemmLibrary library,
                                          const std::function<void()>& between) {
  const size_t nn = static_cast<size_t>(n) * n;
  std::vector<float> a(nn, 0.5f), b(nn, 0.25f), c(nn, 0.0f);
  return time_product_trials(
      n, trials,
      [&] {
        if (library == SgemmLibrary::Backend)
          cpu::gemm(CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                    c.data(), n);
        else
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n,
                      b.data(), n, 0.0f, c.data(), n);
      },
      between);
}

double measure_sgemm_gflops(int n, int repeats, SgemmLibrary library) {
  double best = 0.0;
  for (const SgemmTrial& t : time_sgemm_trials(n, repeats, library))
    best = std::max(best, t.gflops);
  return best;
}

}  // namespace mpitrain
