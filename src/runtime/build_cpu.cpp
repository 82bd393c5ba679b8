// The build's CPU against this one (see build_cpu.hpp). The extensions are the ones GCC emits in
// ordinary code or through the intrinsics used here, each checked where the compiler's macro says
// the build may use it; SSE and SSE2 are every x86-64's. No function of this path uses anything
// but the C library and plain x86-64 code (the target attribute), and none initialises arrays in
// bulk, which the compiler could do with the very instructions in question.
#include "mpitrain/runtime/build_cpu.hpp"

#include <errno.h>  // program_invocation_short_name
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define MPITRAIN_BASELINE __attribute__((target("arch=x86-64")))
// `name` (a literal: __builtin_cpu_supports takes no other) into missing where this CPU lacks it
#define MPITRAIN_NEED(name) \
  if (!__builtin_cpu_supports(name) && n < max) missing[n++] = name

namespace mpitrain {

MPITRAIN_BASELINE int missing_build_features(const char** missing, int max) {
  __builtin_cpu_init();
  int n = 0;
#ifdef __SSE3__
  MPITRAIN_NEED("sse3");
#endif
#ifdef __SSSE3__
  MPITRAIN_NEED("ssse3");
#endif
#ifdef __SSE4_1__
  MPITRAIN_NEED("sse4.1");
#endif
#ifdef __SSE4_2__
  MPITRAIN_NEED("sse4.2");
#endif
#ifdef __SSE4A__
  MPITRAIN_NEED("sse4a");
#endif
#ifdef __POPCNT__
  MPITRAIN_NEED("popcnt");
#endif
#ifdef __LZCNT__
  MPITRAIN_NEED("lzcnt");
#endif
#ifdef __MOVBE__
  MPITRAIN_NEED("movbe");
#endif
#ifdef __BMI__
  MPITRAIN_NEED("bmi");
#endif
#ifdef __BMI2__
  MPITRAIN_NEED("bmi2");
#endif
#ifdef __AVX__
  MPITRAIN_NEED("avx");
#endif
#ifdef __AVX2__
  MPITRAIN_NEED("avx2");
#endif
#ifdef __FMA__
  MPITRAIN_NEED("fma");
#endif
#ifdef __F16C__
  MPITRAIN_NEED("f16c");
#endif
#ifdef __AVXVNNI__
  MPITRAIN_NEED("avxvnni");
#endif
#ifdef __AVX512F__
  MPITRAIN_NEED("avx512f");
#endif
#ifdef __AVX512CD__
  MPITRAIN_NEED("avx512cd");
#endif
#ifdef __AVX512BW__
  MPITRAIN_NEED("avx512bw");
#endif
#ifdef __AVX512DQ__
  MPITRAIN_NEED("avx512dq");
#endif
#ifdef __AVX512VL__
  MPITRAIN_NEED("avx512vl");
#endif
#ifdef __AVX512IFMA__
  MPITRAIN_NEED("avx512ifma");
#endif
#ifdef __AVX512VBMI__
  MPITRAIN_NEED("avx512vbmi");
#endif
#ifdef __AVX512VBMI2__
  MPITRAIN_NEED("avx512vbmi2");
#endif
#ifdef __AVX512VNNI__
  MPITRAIN_NEED("avx512vnni");
#endif
#ifdef __AVX512BITALG__
  MPITRAIN_NEED("avx512bitalg");
#endif
#ifdef __AVX512VPOPCNTDQ__
  MPITRAIN_NEED("avx512vpopcntdq");
#endif
#ifdef __AVX512BF16__
  MPITRAIN_NEED("avx512bf16");
#endif
#ifdef __AVX512FP16__
  MPITRAIN_NEED("avx512fp16");
#endif
#ifdef __GFNI__
  MPITRAIN_NEED("gfni");
#endif
#ifdef __VAES__
  MPITRAIN_NEED("vaes");
#endif
#ifdef __VPCLMULQDQ__
  MPITRAIN_NEED("vpclmulqdq");
#endif
  return n;
}

MPITRAIN_BASELINE void format_build_cpu_refusal(char* buf, size_t n, const char* program,
                                                const char* const* missing, int count) {
  int at = std::snprintf(buf, n, "%s: error: this CPU lacks", program);
  for (int i = 0; i < count && at >= 0 && static_cast<size_t>(at) < n; ++i)
    at += std::snprintf(buf + at, n - at, "%s %s", i == 0 ? "" : ",", missing[i]);
  if (at >= 0 && static_cast<size_t>(at) < n)
    std::snprintf(buf + at, n - at,
                  ", which this build of mpitrain was compiled to use (by default for its build "
                  "host's CPU, -march=native): build it on a node like this one, or with `make "
                  "CMAKE_FLAGS=-DMPITRAIN_NATIVE=OFF` for any x86-64 CPU\n");
}

}  // namespace mpitrain

// Before any other constructor of ours (101: the first priority not reserved).
extern "C" MPITRAIN_BASELINE __attribute__((constructor(101))) void mpitrain_check_build_cpu() {
  constexpr int kMax = 64;
  const char* missing[kMax];
  const int count = mpitrain::missing_build_features(missing, kMax);
  if (count == 0) return;
  // one message under a launcher: rank 0's (the launchers' rank variables; none: not launched)
  const char* ranks[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (const char* name : ranks) {
    const char* rank = std::getenv(name);
    if (rank != nullptr && std::strcmp(rank, "0") != 0) _exit(2);
  }
  char message[1024];
  mpitrain::format_build_cpu_refusal(message, sizeof message, program_invocation_short_name,
                                     missing, count);
  std::fputs(message, stderr);
  _exit(2);
}
