// Stop requests from the batch system or the user.
//
// SIGTERM (time limit, PBS preemption), SIGUSR2 (SLURM --signal=USR2@<sec>) and SIGINT (Ctrl-C)
// only set a flag; the trainer installs the handlers first thing, before MPI_Init, and they stay
// for the rest of the process: a stop signal while the process exits (after the summary, in
// MPI_Finalize) must not turn a committed exit 85 (or 0) into 143. During start-up every rank
// agrees on the flag at each stage (stop_if_requested: exit 85 with no checkpoint written, the
// previous one standing); in the step loop at each step boundary (max all-reduce), where a
// checkpoint is saved and the exit is kExitRequeue. SIGUSR1 is left alone: NCCL may use it. The
// flag is the one piece of process-wide state a signal handler can touch.
#pragma once

#include <csignal>
#include <exception>
#include <string>
#include <utility>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

class StopSignals {
 public:
  StopSignals();  // installs the handlers, for the rest of the process (never restored)
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;
  int last_signal() const;  // the signal that asked to stop, 0 if none
};

// A stop asked for before the first step, thrown on every rank alike; what() is the message.
class StopRequested : public std::exception {
 public:
  explicit StopRequested(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  std::string message_;
};

// Collective over world: throws StopRequested on every rank when a stop signal has reached any
// rank; `during` names the start-up stage for the message ("the data checks").
void stop_if_requested(const StopSignals& signals, const MpiComm& world, const std::string& during);

// How to stop this run with a save, for rank 0's start-up output. Open MPI 4's mpirun (ORTE:
// OMPI_MCA_orte_hnp_uri in the ranks' environment) and srun (SLURM_STEP_ID) forward SIGUSR2, but
// their own SIGINT/SIGTERM kill the ranks unsaved (mpirun exit 1, srun 137). "" without either
// launcher, and where the stops are routed already (MPITRAIN_SAVE_ON_STOP, set by
// jobs/save-on-stop and jobs/train.slurm, which turn them into SIGUSR2 for the launcher).
std::string launcher_stop_hint();

}  // namespace mpitrain
