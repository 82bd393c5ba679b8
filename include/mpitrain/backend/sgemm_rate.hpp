// The machine's matrix-multiply rate: the peak that MFU is measured against on CPU.
#pragma once

namespace mpitrain {

// GFLOP/s of OpenBLAS sgemm (n x n x n, 2n^3 flops a call) with the current OpenMP/OpenBLAS
// thread count; the best of `repeats` timed calls after one warm-up call.
double measure_sgemm_gflops(int n, int repeats);

}  // namespace mpitrain
