// mpi_cuda_aware() against what the MPI installation says of itself (Open MPI's ompi_info):
// an MPI built without CUDA support must never be handed device pointers.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "mpitrain/runtime/mpi.hpp"

namespace {

// "true" / "false" from `ompi_info --parsable --all`, "" where it cannot be asked.
std::string built_with_cuda() {
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(
      popen("ompi_info --parsable --all 2>/dev/null", "r"), pclose);
  if (!pipe) return "";
  char line[512];
  const std::string key = "mpi_built_with_cuda_support:value:";
  std::string answer;
  while (std::fgets(line, sizeof line, pipe.get())) {
    std::string text(line);
    const size_t at = text.find(key);
    if (at == std::string::npos) continue;
    answer = text.substr(at + key.size());
    while (!answer.empty() && (answer.back() == '\n' || answer.back() == ' ')) answer.pop_back();
  }
  return answer;
}

}  // namespace

TEST(MpiCudaAware, AgreesWithTheInstallation) {
  const std::string built = built_with_cuda();
  if (built.empty()) {
    GTEST_SKIP() << "ompi_info says nothing of CUDA support (not Open MPI?)";
  }
  ASSERT_TRUE(built == "true" || built == "false") << "ompi_info said '" << built << "'";
  // Built with CUDA, whether it is on is the runtime's answer (MPIX_Query_cuda_support).
  if (built == "false") {
    EXPECT_FALSE(mpitrain::mpi_cuda_aware()) << "an MPI built without CUDA";
  }
}
