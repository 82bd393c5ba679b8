#include "mpitrain/backend/memory_bandwidth.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

namespace mpitrain {

double measure_copy_gbs(size_t bytes, int repeats) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel
    {  // one contiguous piece a thread
      const size_t threads = omp_get_num_threads(), me = omp_get_thread_num();
      const size_t per = (bytes + threads - 1) / threads, b = std::min(bytes, me * per),
                   e = std::min(bytes, b + per);
      if (b < e) std::memcpy(dst.data() + b, src.data() + b, e - b);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);  // r == 0 maps the pages
  }
  return 2.0 * static_cast<double>(bytes) / best / 1e9;
}

}  // namespace mpitrain
