// trainer: options -> training run. Exit codes: 0 done, 1 failure while working, 2 bad input
// (reported once by rank 0, before any work), 85 stopped by a signal or the time limit after
// saving a checkpoint (requeue and resume).
#include <cstdio>
#include <exception>

#include "mpitrain/app/options.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/train/trainer.hpp"

using namespace mpitrain;

namespace {

int run(int argc, char** argv) {
  const MpiComm world = MpiComm::world();
  try {
    Options options;
    all_or_none(world, [&] { options = parse_options(argc, argv); });
    if (options.help) {
      if (world.rank() == 0) std::printf("%s", options.help_text.c_str());
      return kExitOk;
    }
    return train(options, world);
  } catch (const UsageError& e) {
    // Set-up errors are agreed on by every rank (all_or_none): all exit 2, rank 0 says why.
    if (world.rank() == 0) std::fprintf(stderr, "trainer: error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: rank %d: %s\n", world.rank(), e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, kExitFailure);
    return kExitFailure;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    MpiRuntime mpi(&argc, &argv);
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trainer: %s\n", e.what());
    return kExitFailure;
  }
}
