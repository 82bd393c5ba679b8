// trainer: options -> training run. Exit codes: 0 done, 1 failure while working, 2 bad input
// (reported once by rank 0, before any work), 85 stopped by a signal or the time limit (after
// saving a checkpoint, or during start-up with none written): requeue and resume.
#include <cstdio>
#include <string>

#include "mpitrain/app/options.hpp"
#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/program.hpp"
#include "mpitrain/runtime/signals.hpp"
#include "mpitrain/train/trainer.hpp"

namespace {

int run(int argc, char** argv, const mpitrain::StopSignals& signals) {
  using namespace mpitrain;
  const MpiComm world = MpiComm::world();
  Options options;
  all_or_none(world, [&] { options = parse_options(argc, argv); });
  if (!options.print_instead.empty()) {
    if (world.rank() == 0) std::printf("%s", options.print_instead.c_str());
    return kExitOk;
  }
  if (world.rank() == 0)
    if (const std::string hint = launcher_stop_hint(); !hint.empty())
      std::printf("%s\n", hint.c_str());
  return train(options, world, signals);
}

}  // namespace

int main(int argc, char** argv) {
  // First: on a CPU where OpenBLAS fell back to slower kernels, the program starts again here.
  mpitrain::run_on_best_blas_kernel(argv);
  // Before MPI_Init: a SIGTERM at any moment of start-up is a requeue (85), never a kill (143);
  // installed until the process exits, so that one during the exit cannot turn 85 into 143.
  const mpitrain::StopSignals signals;
  return mpitrain::mpi_program("trainer", argc, argv,
                               [&](int n, char** args) { return run(n, args, signals); });
}
