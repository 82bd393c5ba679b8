// The machine's matrix-multiply rate: the peak that MFU is measured against on CPU.
#pragma once

#include <string>

namespace mpitrain {

// The sgemm the CPU backend runs on this CPU: "oneDNN sgemm" where oneDNN (3.11.2 or later) has
// AVX-512 kernels for it, else "OpenBLAS sgemm" (src/backend/cpu_kernels.hpp says why).
const char* cpu_sgemm_library();
// Why that one, with oneDNN's version: e.g. "oneDNN 2.6.3 is older than 3.11.2: ...".
std::string cpu_sgemm_reason();

// Whose sgemm measure_sgemm_gflops times.
enum class SgemmLibrary { Backend, OpenBlas };

// GFLOP/s of an n x n x n sgemm (2n^3 flops a call) with the current OpenMP/OpenBLAS thread
// count; the best of `repeats` timed calls after one warm-up call. Backend: the CPU backend's
// sgemm (cpu_sgemm_library()), what its products run; OpenBlas: OpenBLAS's cblas_sgemm, for
// comparison (bench).
double measure_sgemm_gflops(int n, int repeats, SgemmLibrary library = SgemmLibrary::Backend);

}  // namespace mpitrain
