// The machine's matrix-multiply rate: the peak that MFU is measured against on CPU.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace mpitrain {

// The sgemm the CPU backend runs on this CPU: "oneDNN sgemm" where oneDNN (3.11.2 or later) has
// AVX-512 kernels for it, else "OpenBLAS sgemm" (src/backend/cpu_kernels.hpp says why).
const char* cpu_sgemm_library();
// That sgemm with its kernels, what the MFU peak cache keys a rate by: "OpenBLAS sgemm SkylakeX"
// (openblas_get_corename()), "oneDNN sgemm".
std::string cpu_sgemm_kernel();
// For the start-up line: "oneDNN sgemm", or OpenBLAS's kernels and why (describe(blas_kernel())):
// "OpenBLAS SkylakeX (chosen: the library's own choice was Haswell)".
std::string cpu_sgemm_in_use();
// Why that one, with oneDNN's version: e.g. "oneDNN 2.6.3 is older than 3.11.2: ...".
std::string cpu_sgemm_reason();

// Whose sgemm measure_sgemm_gflops times.
enum class SgemmLibrary { Backend, OpenBlas };

// One timed sgemm call: its rate, its wall time and the CPU time the whole process spent in it
// (all its threads: cpu_s / wall_s is ~threads when every thread had a CPU to itself).
struct SgemmTrial {
  double gflops = 0.0;
  double wall_s = 0.0;
  double cpu_s = 0.0;
};

// `trials` timed calls of an n x n x n sgemm (2n^3 flops a call) after one warm-up call, with
// the current OpenMP/OpenBLAS thread count. between(): called after each timed call (e.g. to
// sample the host's load), outside the timing. Backend: the CPU backend's sgemm
// (cpu_sgemm_library()), what its products run; OpenBlas: OpenBLAS's cblas_sgemm, for comparison
// (bench).
std::vector<SgemmTrial> time_sgemm_trials(int n, int trials,
                                          SgemmLibrary library = SgemmLibrary::Backend,
                                          const std::function<void()>& between = {});

// The same timing of any n x n x n product: multiply() once to warm up, then `trials` times.
std::vector<SgemmTrial> time_product_trials(int n, int trials,
                                            const std::function<void()>& multiply,
                                            const std::function<void()>& between = {});

// GFLOP/s of the best of `repeats` timed calls (time_sgemm_trials).
double measure_sgemm_gflops(int n, int repeats, SgemmLibrary library = SgemmLibrary::Backend);

}  // namespace mpitrain
