#include "mpitrain/runtime/signals.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>

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
  for (int sig : kSignals)
    if (sigaction(sig, &action, nullptr) != 0)
      MPITRAIN_THROW("sigaction failed for signal " + std::to_string(sig) + ": " +
                     std::strerror(errno));
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

std::string launcher_stop_hint() {
  if (std::getenv("MPITRAIN_SAVE_ON_STOP")) return "";
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string way =
      "or start under jobs/save-on-stop, which turns Ctrl-C and SIGTERM into that";
  if (!std::getenv("OMPI_MCA_orte_hnp_uri")) {
    if (!job || !std::getenv("SLURM_STEP_ID")) return "";
    return std::string("to stop with a checkpoint (exit 85): scancel --signal=USR2 ") + job +
           " or kill -USR2 <srun's pid> (srun passes SIGUSR2 to the tasks; its own SIGINT/SIGTERM "
           "kill them unsaved), " +
           way;
  }
  // mpirun's pid where this rank is its child (its host); else the user looks it up.
  const std::string parent = std::to_string(::getppid());
  std::string command;
  std::getline(std::ifstream("/proc/" + parent + "/comm"), command);
  const bool child_of_mpirun = command == "mpirun" || command == "mpiexec" || command == "orterun";
  return "to stop with a checkpoint (exit 85): kill -USR2 " +
         (child_of_mpirun ? parent : std::string("<mpirun's pid>")) +
         " (mpirun passes SIGUSR2 to the ranks; its own SIGINT/SIGTERM kill them unsaved), " + way;
}

}  // namespace mpitrain
