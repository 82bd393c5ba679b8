#include "mpitrain/ckpt/async_saver.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <utility>

#include "mpitrain/ckpt/format.hpp"

namespace mpitrain {

namespace {

// The calling thread at the lowest normal priority (nice 19, this thread only). Where every
// core trains, a writer at the training's priority delays each OpenMP team it preempts (GPT-2
// small on 2 cores: the step after a save took 7.3 s instead of 3.1); at nice 19 the training
// threads take their cores back sooner (that step: 4.3 s). SCHED_IDLE, lower still, was measured
// too: the writer then got so little CPU that the write outlasted 5 steps and the next save
// waited for it (bench/async_save.sh). If the system refuses, it writes at the normal priority,
// said on stderr.
void lower_priority() {
  const auto tid = static_cast<id_t>(syscall(SYS_gettid));
  if (setpriority(PRIO_PROCESS, tid, 19) != 0)
    std::fprintf(stderr, "checkpoint writer: nice 19 refused (%s): written at normal priority\n",
                 std::strerror(errno));
}

}  // namespace

bool AsyncSaver::threads_supported() {
  int provided = 0;
  MPI_CHECK(MPI_Query_thread(&provided));
  return provided == MPI_THREAD_MULTIPLE;
}

AsyncSaver::AsyncSaver(std::string dir, const MpiComm& world, int keep_last, FaultPlan faults)
    : world_(world.dup()), store_(std::move(dir), world_, keep_last, std::move(faults)) {}

AsyncSaver::~AsyncSaver() {
  if (writer_.joinable()) writer_.join();
}

void AsyncSaver::start(const CheckpointManifest& m, const CheckpointState& s,
                       const std::string& name) {
  if (in_flight()) MPITRAIN_THROW("AsyncSaver::start: the previous save was not collected");
  done_ = {m.step, name.empty() ? step_dir_name(m.step) : name, "", 0.0, 0.0, ""};
  error_ = nullptr;
  finished_.store(false, std::memory_order_release);
  writer_ = std::thread([this, m, s, name] {
    lower_priority();
    const auto t0 = std::chrono::steady_clock::now();
    try {
      done_.dir = name.empty() ? store_.save(m, s) : store_.save_as(name, m, s);
    } catch (const std::exception& e) {
      done_.error = e.what();
      error_ = std::current_exception();
    }
    done_.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rusage used{};
    if (getrusage(RUSAGE_THREAD, &used) == 0)
      done_.cpu_seconds = static_cast<double>(used.ru_utime.tv_sec + used.ru_stime.tv_sec) +
                          1e-6 * static_cast<double>(used.ru_utime.tv_usec + used.ru_stime.tv_usec);
    finished_.store(true, std::memory_order_release);
  });
}

std::optional<AsyncSaver::Done> AsyncSaver::wait() {
  if (!in_flight()) return std::nullopt;
  writer_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return done_;
}

}  // namespace mpitrain
