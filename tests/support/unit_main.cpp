// GoogleTest main of unit_tests: MPI only for the tests that start it (unit_mpi.hpp), ended after
// the last test, its session directory removed.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <system_error>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "unit_mpi.hpp"

namespace {

// The process's MPI: its runtime and the session directory it was started in.
struct UnitMpi {
  std::string session_dir;
  std::optional<mpitrain::MpiRuntime> runtime;

  ~UnitMpi() {
    runtime.reset();  // MPI_Finalize, which empties the session directory
    std::error_code ignored;
    if (!session_dir.empty()) std::filesystem::remove_all(session_dir, ignored);
  }
};

UnitMpi* g_mpi = nullptr;  // main's, for start_mpi()

}  // namespace

namespace mpitrain::test {

void start_mpi() {
  if (g_mpi->runtime) return;
  const std::filesystem::path base =
      std::filesystem::read_symlink("/proc/self/exe").parent_path() / "test-tmp" / "unit_tests";
  std::filesystem::create_directories(base);
  std::string dir = (base / "mpi-XXXXXX").string();
  if (!mkdtemp(dir.data())) MPITRAIN_THROW("mkdtemp " + dir + ": " + std::strerror(errno));
  g_mpi->session_dir = dir;
  if (setenv("OMPI_MCA_orte_tmpdir_base", dir.c_str(), 1) != 0)
    MPITRAIN_THROW(std::string("setenv: ") + std::strerror(errno));
  g_mpi->runtime.emplace(nullptr, nullptr);
}

}  // namespace mpitrain::test

int main(int argc, char** argv) {
  UnitMpi mpi;
  g_mpi = &mpi;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
