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

// This thread's CPU time so far (user + system), in seconds; 0 where it cannot be read.
double thread_cpu_seconds() {
  rusage used{};
  if (getrusage(RUSAGE_THREAD, &used) != 0) return 0.0;
  return static_cast<double>(used.ru_utime.tv_sec + used.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(used.ru_utime.tv_usec + used.ru_stime.tv_usec);
}

}  // namespace

SaveDone save_now(CheckpointStore& store, const CheckpointManifest& m, const CheckpointState& s,
                  const std::string& name) {
  SaveDone done{m.step, name.empty() ? step_dir_name(m.step) : name,
                "",     std::chrono::steady_clock::now(),
                0.0,    0.0};
  const double cpu0 = thread_cpu_seconds();
  done.dir = name.empty() ? store.save(m, s) : store.save_as(name, m, s);
  done.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - done.began).count();
  done.cpu_seconds = thread_cpu_seconds() - cpu0;
  return done;
}

bool AsyncSaver::threads_supported() {
  int provided = 0;
  MPI_CHECK(MPI_Query_thread(&provided));
  return provided == MPI_THREAD_MULTIPLE;
}

AsyncSaver::AsyncSaver(const CheckpointStore& like)
    : world_(like.world().dup()), store_(like.dir(), world_, like.keep_last(), like.faults()) {}

AsyncSaver::~AsyncSaver() {
  if (writer_.joinable()) writer_.join();
}

void AsyncSaver::start(const CheckpointManifest& m, const CheckpointState& s,
                       const std::string& name) {
  if (in_flight()) MPITRAIN_THROW("AsyncSaver::start: the previous save was not collected");
  error_ = nullptr;
  finished_.store(false, std::memory_order_release);
  writer_ = std::thread([this, m, s, name] {
    lower_priority();
    try {
      done_ = save_now(store_, m, s, name);
    } catch (const std::exception&) {
      error_ = std::current_exception();
    }
    finished_.store(true, std::memory_order_release);
  });
}

std::optional<SaveDone> AsyncSaver::wait() {
  if (!in_flight()) return std::nullopt;
  writer_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  return done_;
}

}  // namespace mpitrain
