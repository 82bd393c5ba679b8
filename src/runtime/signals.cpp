#include "mpitrain/runtime/signals.hpp"

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr int kSignals[3] = {SIGTERM, SIGUSR2, SIGINT};
volatile std::sig_atomic_t stop_signal = 0;

extern "C" void on_stop_signal(int sig) { stop_signal = sig; }

}  // namespace

StopSignals::StopSignals() {
  stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < 3; ++i)
    if (sigaction(kSignals[i], &action, &previous_[i]) != 0)
      MPITRAIN_THROW("sigaction failed for signal " + std::to_string(kSignals[i]));
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &previous_[i], nullptr);
}

bool StopSignals::requested() const { return stop_signal != 0; }

int StopSignals::last_signal() const { return stop_signal; }

void stop_if_requested(const StopSignals& signals, const MpiComm& world,
                       const std::string& during) {
  int sig = signals.last_signal();
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, world.get()));
  if (sig == 0) return;
  const char* name = sig == SIGTERM ? "SIGTERM" : sig == SIGUSR2 ? "SIGUSR2" : "SIGINT";
  std::string message = "stopped by ";
  message += name;
  message += " during start-up (" + during + "), before the first step: no checkpoint written,";
  message += " the previous one stands; exit " + std::to_string(kExitRequeue) + " = requeue me";
  throw StopRequested(message);
}

}  // namespace mpitrain
