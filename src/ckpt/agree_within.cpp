// Agreement on a checkpoint write's step, bounded where a failure is known (ckpt_io.hpp).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "ckpt_io.hpp"

namespace mpitrain {

namespace {

// Waits for request; past the deadline (when given) prints message and ends the job.
void wait_or_abort(MPI_Request& request, bool bounded, const std::string& message) {
  if (!bounded) {
    MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(kAgreeDeadlineSeconds);
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::fprintf(stderr,
               "%s (the other ranks did not agree on it within %.0f s: one is stuck in a "
               "collective HDF5 call that the failure left unmatched; ending the job)\n",
               message.c_str(), kAgreeDeadlineSeconds);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, kExitFailure);
}

}  // namespace

void agree_within(const MpiComm& world, const std::string& save, const std::string& failure,
                  const std::function<void()>& step) {
  std::string message;
  bool failed = false;
  try {
    step();
  } catch (const std::exception& e) {
    failed = true;
    message = e.what();
  }
  // The lowest failing rank speaks for all.
  int mine[2] = {failed ? world.rank() : world.size(), 0};
  int first[2] = {0, 0};
  MPI_Request request;
  MPI_CHECK(MPI_Iallreduce(mine, first, 1, MPI_2INT, MPI_MINLOC, world.get(), &request));
  wait_or_abort(request, failed || !failure.empty(),
                save + ": " + (failed ? message : failure));
  if (first[0] == world.size()) return;
  int size = static_cast<int>(message.size());
  MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT, first[0], world.get()));
  message.resize(size);
  MPI_CHECK(MPI_Bcast(message.data(), size, MPI_CHAR, first[0], world.get()));
  throw Error(message);
}

}  // namespace mpitrain
