// The CPU a build was compiled for against the CPU it runs on.
//
// The build compiles for the build host's CPU (-march=native, CMake's MPITRAIN_NATIVE), so a
// program built on a newer CPU than a compute node's (a Sapphire Rapids login node, Skylake
// nodes) would die there of SIGILL, wherever the compiler first used an instruction the node
// lacks. Instead, every program links a constructor that runs before any other code of ours
// (the first user priority) and, where this CPU lacks an instruction-set extension the build was
// compiled for, prints "<program>: error: ..." naming them and the two remedies, and exits 2.
// That path is compiled for plain x86-64 and calls only the C library.
#pragma once

#include <cstddef>

namespace mpitrain {

// The extensions the build was compiled for that this CPU lacks, GCC's names ("avx512f", ...),
// into missing[0, max); returns how many (at most max).
int missing_build_features(const char** missing, int max);

// The refusal for `program` lacking `missing` (count of them), into buf (n bytes, truncated).
void format_build_cpu_refusal(char* buf, size_t n, const char* program, const char* const* missing,
                              int count);

}  // namespace mpitrain
