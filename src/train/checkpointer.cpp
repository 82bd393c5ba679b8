#include "mpitrain/train/checkpointer.hpp"

#include <cstdio>
#include <utility>

#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/monitor/memory.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

std::string gb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GB", bytes / 1e9);
  return text;
}

}  // namespace

std::string NodeMemory::text() const {
  return gb(need) + " of host memory on a node, " + (fits() ? "within" : "more than") +
         " 3/4 of the " + gb(available) + " available";
}

NodeMemory node_memory(size_t floats, const MpiComm& node, const MpiComm& world) {
  double node_bytes = static_cast<double>(floats * sizeof(float));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &node_bytes, 1, MPI_DOUBLE, MPI_SUM, node.get()));
  double figures[2] = {node_bytes, -available_memory_bytes()};  // max need, min available
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, figures, 2, MPI_DOUBLE, MPI_MAX, world.get()));
  return {figures[0], -figures[1]};
}

SavePlan plan_saves(const SaveOptions& options, const CheckpointState& live, const MpiComm& node,
                    const MpiComm& world) {
  SavePlan plan;
  plan.mirrored = options.mirrored;
  if (!options.mirrored && !options.async) return plan;
  // On a writer what a save writes: a device's host copies, or the CPU's copy for the writer.
  plan.staging_floats = mirror_floats(live, MirrorUse::Save);
  const NodeMemory memory = node_memory(plan.staging_floats, node, world);  // agreed
  if (options.mirrored) {
    const std::string copy = "copies the writers' master and optimizer state from the device to ";
    require(memory.fits() || !options.planned,
            "checkpoints: a save " + copy + memory.text() +
                ": run on more nodes (the writers spread over them), or without planned saves "
                "(--save-interval 0, no --save-best, --exit-at-step or --exit-after-minutes)");
    plan.mirror_now = options.planned;
    plan.note = memory.fits()
                    ? "checkpoints: host copies of the writers' state, " + memory.text() +
                          " (rank 0: " + std::to_string(plan.staging_floats) + " floats), " +
                          (options.planned ? "made now" : "made at a stop's save")
                    : "warning: a stop's checkpoint (a signal) " + copy + memory.text() +
                          ": it may fail";
  }
  if (!options.async) return plan;
  std::string why;
  if (!AsyncSaver::threads_supported())
    why = "this MPI does not provide MPI_THREAD_MULTIPLE, which the writer thread needs";
  else if (!memory.fits())
    why = "the staging copy needs " + gb(memory.need) + " of host memory on a node, more than " +
          "3/4 of the " + gb(memory.available) + " available";
  plan.async = why.empty();  // alike on every rank: the figures are agreed, the MPI is one
  if (!why.empty()) {
    if (!plan.note.empty()) plan.note += '\n';
    plan.note += "checkpoints: synchronous saves, not --async-save: ";
    plan.note += why;
    return plan;
  }
  if (!options.async_auto || world.size() == 1) return plan;  // one rank's writer waits on none
  int writer_cpu = options.writer_cpu ? 1 : 0;                // on every rank's host
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &writer_cpu, 1, MPI_INT, MPI_MIN, world.get()));
  if (writer_cpu) return plan;
  plan.async = false;
  plan.async_when_slow = true;
  if (!plan.note.empty()) plan.note += '\n';
  plan.note += "checkpoints: synchronous saves until one takes " +
               std::to_string(static_cast<int>(kSlowSave)) +
               " s or more, then in the background (--async-save auto: the ranks' threads take "
               "every CPU of a host, and background writers would wait for them; --async-save "
               "true writes every save in the background)";
  return plan;
}

Checkpointer::Checkpointer(const SavePlan& plan, CheckpointStore& store,
                           const CheckpointState& live, Backend<float>& backend, MetricsLog& log,
                           TraceRecorder& trace)
    : store_(store),
      live_(live),
      mirrored_(plan.mirrored),
      backend_(backend),
      log_(log),
      trace_(trace) {
  bytes_ = static_cast<uint64_t>(ParamLayout(live.config).total()) * (1 + live.state.size()) *
           sizeof(float);
  if (store.world().rank() == 0 && !plan.note.empty()) std::printf("%s\n", plan.note.c_str());
  if (plan.mirror_now) make_mirror();
  if (plan.async) start_background(plan.staging_floats);
  if (plan.async_when_slow) when_slow_ = plan.staging_floats;
}

void Checkpointer::start_background(size_t staging_floats) {
  if (!mirrored_ && staging_floats > 0) {
    staging_ = backend_.alloc(staging_floats);
    staged_.emplace(live_);
    staged_->master = staging_;
    for (size_t k = 0; k < staged_->state.size(); ++k)
      staged_->state[k] = staging_ + (k + 1) * live_.owned.size();
  }
  saver_ = std::make_unique<AsyncSaver>(store_);
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

void Checkpointer::make_mirror() {
  all_or_none(store_.world(), [&] { mirror_.emplace(backend_, live_, nullptr, MirrorUse::Save); });
}

const CheckpointState& Checkpointer::stage() {
  if (mirrored_) {  // the host copies are the staging buffer, made by the first save needing them
    if (!mirror_) make_mirror();
    mirror_->download();
    return mirror_->host();
  }
  if (!staged_) return live_;  // synchronous, or nothing to write here
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
  if (written && when_slow_) {  // --async-save auto: a slow save turns the next to the background
    double slowest = stall;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &slowest, 1, MPI_DOUBLE, MPI_MAX, store_.world().get()));
    if (slowest >= kSlowSave) {
      start_background(*std::exchange(when_slow_, std::nullopt));
      if (store_.world().rank() == 0)
        std::printf(
            "checkpoints: that save took %.2f s (%d s or more): the next ones in the "
            "background\n",
            slowest, static_cast<int>(kSlowSave));
    }
  }
  return stall;
}

void Checkpointer::poll() {
  if (!saver_ || !saver_->in_flight()) return;  // alike on every rank
  // Collected when every rank's writer is done, at the same step everywhere: a failed save
  // (agreed by the writers) then throws on every rank at once.
  int finished = saver_->finished() ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &finished, 1, MPI_INT, MPI_MIN, store_.world().get()));
  if (finished) wait();
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
