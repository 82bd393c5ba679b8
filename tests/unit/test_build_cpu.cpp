// The message refusing a CPU that lacks an extension the build uses (runtime/build_cpu.hpp); the
// refusal itself, before main, is tests/e2e/build_cpu.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "mpitrain/runtime/build_cpu.hpp"

namespace mpitrain {
namespace {

TEST(BuildCpu, RefusalNamesEachLackedExtensionAndBothRemedies) {
  const char* missing[] = {"avx512f", "avx512bw"};
  char buf[1024];
  format_build_cpu_refusal(buf, sizeof buf, "trainer", missing, 2);
  EXPECT_EQ(std::string(buf),
            "trainer: error: this CPU lacks avx512f, avx512bw, which this build of mpitrain was "
            "compiled to use (by default for its build host's CPU, -march=native): build it on a "
            "node like this one, or with `make CMAKE_FLAGS=-DMPITRAIN_NATIVE=OFF` for any x86-64 "
            "CPU\n");
}

// A buffer too small for the message: cut, terminated, nothing written past it.
TEST(BuildCpu, RefusalFitsItsBuffer) {
  const char* missing[] = {"avx512f", "avx512bw", "avx512vl"};
  char buf[40];
  std::memset(buf, 'x', sizeof buf);
  char* guard = buf + 30;
  format_build_cpu_refusal(buf, 30, "trainer", missing, 3);
  EXPECT_EQ(std::strlen(buf), 29u);
  EXPECT_EQ(std::string(buf),
            std::string("trainer: error: this CPU lacks avx512f, avx512bw").substr(0, 29));
  EXPECT_EQ(std::string(guard, 10), std::string(10, 'x'));
}

}  // namespace
}  // namespace mpitrain
