// Stop requests from the batch system or the user.
//
// SIGTERM (time limit, PBS preemption), SIGUSR2 (SLURM --signal=USR2@<sec>) and SIGINT (Ctrl-C)
// only set a flag while they are installed; the trainer installs them first thing, before
// MPI_Init. During start-up every rank agrees on the flag at each stage (stop_if_requested: exit
// 85 with no checkpoint written, the previous one standing); in the step loop at each step
// boundary (max all-reduce), where a checkpoint is saved and the exit is kExitRequeue. SIGUSR1 is
// left alone: NCCL may use it. The flag is the one piece of process-wide state a signal handler
// can touch.
#pragma once

#include <csignal>
#include <exception>
#include <string>
#include <utility>

#include "mpitrain/runtime/mpi.hpp"

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

}  // namespace mpitrain
