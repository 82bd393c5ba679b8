// Stop requests from the batch system or the user.
//
// SIGTERM (time limit, PBS preemption), SIGUSR2 (SLURM --signal=USR2@<sec>) and SIGINT (Ctrl-C)
// only set a flag while they are installed; the trainer agrees on it at the next step boundary
// (max all-reduce), saves a checkpoint and exits with kExitRequeue. SIGUSR1 is left alone: NCCL
// may use it. The flag is the one piece of process-wide state a signal handler can touch.
#pragma once

#include <csignal>

namespace mpitrain {

class StopSignals {
 public:
  StopSignals();   // installs the handlers
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  bool requested() const;
  int last_signal() const;  // the signal that asked to stop, 0 if none

 private:
  struct sigaction previous_[3];
};

}  // namespace mpitrain
