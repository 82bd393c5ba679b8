#include "mpitrain/train/checkpointer.hpp"

#include <cstdio>

#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/monitor/memory.hpp"

namespace mpitrain {

namespace {

// Floats of the staging copy on this rank: the master and each optimizer buffer over the owned
// ranges, on a rank that writes (a device's mirror is its staging: nothing more).
size_t staging_floats(const CheckpointState& s, bool mirrored) {
  if (!s.writer || mirrored) return 0;
  return s.owned.size() * (1 + s.state.size());
}

}  // namespace

Checkpointer::Checkpointer(bool async, CheckpointStore& store, const CheckpointState& live,
                           CheckpointMirror* mirror, Backend<float>& backend, const MpiComm& node,
                           MetricsLog& log, TraceRecorder& trace)
    : store_(store), live_(live), mirror_(mirror), backend_(backend), log_(log), trace_(trace) {
  const MpiComm& world = store.world();
  bytes_ = static_cast<uint64_t>(ParamLayout(live.config).total()) * (1 + live.state.size()) *
           sizeof(float);
  if (!async) return;
  // What each node's ranks would stage together, against what the node has (the least of any
  // rank's view, so that every rank decides alike).
  const size_t floats = staging_floats(live, mirror != nullptr);
  double node_bytes = static_cast<double>(floats * sizeof(float));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &node_bytes, 1, MPI_DOUBLE, MPI_SUM, node.get()));
  double figures[2] = {node_bytes, -available_memory_bytes()};  // max need, min available
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, figures, 2, MPI_DOUBLE, MPI_MAX, world.get()));
  const double need = figures[0], available = -figures[1];
  const auto gb = [](double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
    return std::string(text);
  };
  std::string why;
  if (!AsyncSaver::threads_supported())
    why = "this MPI does not provide MPI_THREAD_MULTIPLE, which the writer thread needs";
  else if (need > kStagingMemoryShare * available)
    why = "the staging copy needs " + gb(need) + " of host memory on a node, more than 3/4 of " +
          "the " + gb(available) + " available";
  if (!why.empty()) {  // alike on every rank: the figures are agreed, the MPI is one
    if (world.rank() == 0)
      std::printf("checkpoints: synchronous saves, not --async-save: %s\n", why.c_str());
    return;
  }
  if (floats > 0) {
    staging_ = backend.alloc(floats);
    staged_.emplace(live);
    staged_->master = staging_;
    for (size_t k = 0; k < staged_->state.size(); ++k)
      staged_->state[k] = staging_ + (k + 1) * live.owned.size();
  }
  saver_ = std::make_unique<AsyncSaver>(store);
}

Checkpointer::~Checkpointer() {
  try {  // an exit past finish(): an error unwinding the run
    wait();
  } catch (const std::exception& e) {
    if (store_.world().rank() == 0)
      std::fprintf(stderr, "checkpoint: the save in flight was not committed: %s\n", e.what());
  }
  saver_.reset();  // the writer joined before its buffer goes
  if (staging_) backend_.free(staging_);
}

const CheckpointState& Checkpointer::stage() {
  if (mirror_) mirror_->download();  // the host copies are the staging buffer
  if (!staged_) return live_;        // synchronous, mirrored, or nothing to write here
  const size_t n = live_.owned.size();
  backend_.copy(staged_->master, live_.master, n);
  for (size_t k = 0; k < live_.state.size(); ++k)
    backend_.copy(staged_->state[k], live_.state[k], n);
  return *staged_;
}

double Checkpointer::save(const CheckpointManifest& m, const std::string& name) {
  double stall = 0.0;
  std::optional<SaveDone> written;  // a synchronous save's
  {
    TraceScope scope(&trace_, TraceLane::Io, "checkpoint save", &stall, static_cast<int>(m.step));
    wait();
    const CheckpointState& s = stage();
    store_.faults().at("staged", store_.world().rank(), m.step);
    if (saver_)
      saver_->start(m, s, name);
    else
      written = save_now(store_, m, s, name);
  }
  last_stall_ = stall;
  log_.checkpoint_stall(stall);
  if (written) report(*written);
  return stall;
}

void Checkpointer::poll() {
  if (saver_ && saver_->in_flight() && saver_->finished()) wait();
}

void Checkpointer::wait() {
  if (!saver_) return;
  if (const std::optional<SaveDone> done = saver_->wait()) {
    trace_.add(TraceLane::Io, "checkpoint write (background)", done->began,
               done->began + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(done->seconds)),
               static_cast<int>(done->step));
    report(*done);
  }
}

void Checkpointer::report(const SaveDone& done) {
  // A synchronous save's write is its stall (reported by save()); the writer's is its own.
  const bool background = saver_ != nullptr;
  last_write_ = background ? done.seconds : 0.0;
  log_.checkpoint_written(done.seconds, bytes_);
  if (store_.world().rank() != 0) return;
  const std::string what = done.name.starts_with("step-")
                               ? "step " + std::to_string(done.step)
                               : done.name + " (step " + std::to_string(done.step) + ")";
  if (background)
    std::printf(
        "saved checkpoint %s in %.2f s in the background (%.2f GB; the writer's CPU "
        "%.2f s; the steps stalled %.3f s)\n",
        what.c_str(), done.seconds, bytes_ / 1e9, done.cpu_seconds, last_stall_);
  else
    std::printf("saved checkpoint %s in %.2f s (%.2f GB)\n", what.c_str(), last_stall_,
                bytes_ / 1e9);
  std::fflush(stdout);
}

}  // namespace mpitrain
