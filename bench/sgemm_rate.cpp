// sgemm-rate: this machine's sgemm rate, the peak that CPU MFU is measured against.
//
//   sgemm-rate --threads N [--n 2048] [--repeats 5] [--openblas | --bf16]
//   sgemm-rate --library           (prints which sgemm the backend runs on this CPU)
//   sgemm-rate --kernel            (prints OpenBLAS's kernels in use and why: blas_kernel.hpp)
//   sgemm-rate --runnable-kernels  (prints the cores of each class this CPU runs, best first:
//                                   "SkylakeX Haswell", "Haswell", or nothing)
//
// Prints one line: the GFLOP/s (2 n^3 flops per call, best of `repeats` timed calls after one
// warm-up call) with N OpenMP/OpenBLAS threads, of the CPU backend's sgemm (oneDNN's on a CPU with
// AVX-512, else OpenBLAS's), or with
// --openblas of OpenBLAS's cblas_sgemm, or with --bf16 of the backend's bf16 products (oneDNN's
// bf16 matmul: the bf16 peak; "n/a" on a CPU without bf16 instructions). bench/run.sh passes the
// first to the trainer as --peak-gflops and prints the second beside it; the third is the
// --peak-gflops of its bf16 rows.
#include "mpitrain/backend/sgemm_rate.hpp"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mpitrain/backend/bf16_gemm_rate.hpp"
#include "mpitrain/backend/blas_kernel.hpp"

namespace {

void usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s --threads N [--n 2048] [--repeats 5] [--openblas | --bf16] | --library | "
               "--kernel | --runnable-kernels\n",
               prog);
}

// Parses a positive integer; false if `text` is not one.
bool parse_positive(const char* text, int* out) {
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value <= 0 || value > 1000000) return false;
  *out = static_cast<int>(value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  mpitrain::run_on_best_blas_kernel(argv);
  int threads = 0, n = 2048, repeats = 5;
  auto library = mpitrain::SgemmLibrary::Backend;
  bool bf16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    }
    if (arg == "--library") {
      std::printf("%s\n", mpitrain::cpu_sgemm_library());
      return 0;
    }
    if (arg == "--kernel") {
      std::printf("%s\n", mpitrain::describe(mpitrain::blas_kernel()).c_str());
      return 0;
    }
    if (arg == "--runnable-kernels") {
      std::string cores;
      for (const std::string& core : mpitrain::runnable_blas_kernels(mpitrain::cpu_features()))
        cores += (cores.empty() ? "" : " ") + core;
      std::printf("%s\n", cores.c_str());
      return 0;
    }
    if (arg == "--bf16") {
      bf16 = true;
      continue;
    }
    if (arg == "--openblas") {
      library = mpitrain::SgemmLibrary::OpenBlas;
      continue;
    }
    int* target = arg == "--threads"   ? &threads
                  : arg == "--n"       ? &n
                  : arg == "--repeats" ? &repeats
                                       : nullptr;
    if (target == nullptr || i + 1 >= argc || !parse_positive(argv[i + 1], target)) {
      std::fprintf(stderr, "sgemm-rate: bad or missing value for '%s'\n", arg.c_str());
      usage(argv[0]);
      return 2;
    }
    ++i;
  }
  if (threads == 0) {
    std::fprintf(stderr, "sgemm-rate: --threads is required\n");
    usage(argv[0]);
    return 2;
  }
  if (bf16 && library == mpitrain::SgemmLibrary::OpenBlas) {
    std::fprintf(stderr,
                 "sgemm-rate: --openblas and --bf16 exclude each other (OpenBLAS has no "
                 "bf16 GEMM here)\n");
    usage(argv[0]);
    return 2;
  }
  omp_set_num_threads(threads);
  openblas_set_num_threads(threads);
  if (bf16) {
    double best = 0.0;
    for (const mpitrain::SgemmTrial& t : mpitrain::time_bf16_gemm_trials(n, repeats))
      best = std::max(best, t.gflops);
    if (best > 0)
      std::printf("%.1f\n", best);
    else
      std::printf("n/a\n");
    return 0;
  }
  std::printf("%.1f\n", mpitrain::measure_sgemm_gflops(n, repeats, library));
  return 0;
}
