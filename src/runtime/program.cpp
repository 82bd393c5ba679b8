#include "mpitrain/runtime/program.hpp"

#include <cstdio>
#include <exception>

#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

int mpi_program(const char* name, int argc, char** argv,
                const std::function<int(int argc, char** argv)>& run) {
  try {
    MpiRuntime mpi(&argc, &argv);
    const int rank = MpiComm::world().rank();
    try {
      return run(argc, argv);
    } catch (const UsageError& e) {
      if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", name, e.what());
      return kExitUsage;
    } catch (const AgreedError& e) {
      if (rank == 0) std::fprintf(stderr, "%s: error: %s\n", name, e.what());
      return kExitFailure;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: rank %d: %s\n", name, rank, e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
  }
  return kExitFailure;
}

int tool_program(const char* name, int argc, char** argv,
                 const std::function<int(int argc, char** argv)>& run) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return kExitFailure;
  }
}

}  // namespace mpitrain
