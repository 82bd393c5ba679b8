// Which OpenBLAS kernels the fp32 products run, and making them the fastest this CPU supports.
//
// OpenBLAS built with DYNAMIC_ARCH (Debian's, most distributions') picks its kernels ("core")
// by CPU model when it loads, and falls back on CPUs newer than it: 0.3.21 runs Prescott (SSE3)
// on Sapphire/Emerald Rapids Xeons, at 0.2x the SkylakeX kernels' rate (issue 33). The choice
// below goes by what the CPU supports instead; the library reads OPENBLAS_CORETYPE only while it
// loads, so run_on_best_blas_kernel starts the program again with it set (blas_kernel_start.cpp).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mpitrain {

// The instructions the OpenBLAS kernels need, as the kernel reports them (cpuid, with the
// AVX-512 state the OS saves) in the "flags" line of /proc/cpuinfo.
struct CpuFeatures {
  bool avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512() const { return avx512f && avx512bw && avx512vl && avx512dq; }  // SkylakeX's
  bool avx2_fma() const { return avx2 && fma; }                                // Haswell's
};

// The features named in a /proc/cpuinfo "flags" line (words separated by spaces).
CpuFeatures cpu_features_of_flags(std::string_view flags);
// This CPU's, from the first "flags" line of `cpuinfo`; none where it cannot be read.
CpuFeatures cpu_features(const std::string& cpuinfo = "/proc/cpuinfo");

struct BlasKernelChoice {
  std::string core;          // the OpenBLAS core type to run (an OPENBLAS_CORETYPE value)
  std::string reason;        // why, for the banner
  bool switch_core = false;  // core is not what the library runs now: set OPENBLAS_CORETYPE
};

// Pure: the core for a CPU with `cpu`'s features, where the library chose `library_choice`
// itself (openblas_get_corename() with OPENBLAS_CORETYPE unset) and the user set
// OPENBLAS_CORETYPE to `user_set` ("" if not). A user's setting is respected (the reason says
// where it is slower); else AVX-512 (F, BW, VL, DQ) runs SkylakeX (on an Emerald Rapids Xeon
// 131.7 GFLOP/s, Cooperlake 103.6, Haswell 78.4, Prescott 26.5: issue 33) and AVX2 with FMA runs
// Haswell. The library's own choice stays where it is of that class already (Zen: Haswell's
// kernels with Zen's blocking; SapphireRapids: a library newer than 0.3.21 that knows the CPU),
// where the CPU has neither, and where `switchable` is false (a library built for one CPU,
// without DYNAMIC_ARCH, ignores OPENBLAS_CORETYPE).
BlasKernelChoice choose_blas_kernel(const CpuFeatures& cpu, const std::string& library_choice,
                                    const std::string& user_set, bool switchable);

// Pure: the cores of each instruction-set class that `cpu` can run, best first: SkylakeX (AVX-512
// F, BW, VL, DQ), Haswell (AVX2 and FMA); a core the CPU lacks dies of SIGILL. What
// bench/blas_kernel.sh forces in turn (sgemm-rate --runnable-kernels).
std::vector<std::string> runnable_blas_kernels(const CpuFeatures& cpu);

// The OpenBLAS kernels this process runs: what the library says (openblas_get_corename()), and
// the choice for this CPU with why. Where run_on_best_blas_kernel started the program again, the
// library's own choice is the one it reported before.
struct BlasKernel {
  std::string in_use;
  BlasKernelChoice choice;
};
BlasKernel blas_kernel();

// For banners: "OpenBLAS SkylakeX (chosen: the library's own choice was Haswell)"; where the
// library does not run the choice, says so.
std::string describe(const BlasKernel& kernel);

// Called first in main(), before MPI_Init and before any thread starts: where the choice for
// this CPU is not what the library runs, starts this program again (execv of the file that
// /proc/self/exe names: the same process id, name, argv and environment, so mpirun's and srun's
// PMIx variables stay) with
// OPENBLAS_CORETYPE set and MPITRAIN_OPENBLAS_OWN_CORE naming the library's own choice, which
// also keeps it from starting again. Returns where nothing is to change, or where execv fails
// (with a warning on stderr: the run goes on with the library's kernels).
void run_on_best_blas_kernel(char** argv);

}  // namespace mpitrain
