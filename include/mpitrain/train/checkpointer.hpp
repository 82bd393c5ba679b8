// The run's saves: each one's staging copy, its write (now, or by the writer thread of
// ckpt/async_saver.hpp), and what it cost, for the metrics, the trace and the console.
//
//   save(m)    the save in flight (if any) waited for; the state copied into the staging buffer
//              (fault phase "staged"); then written in the background (async) or now (sync).
//              What the step loop lost is reported as checkpoint_stall_ms.
//   poll()     at every step end: a background save that has committed is reported
//              (checkpoint_write_ms, checkpoint_bytes, "saved checkpoint step N ...").
//   wait()     before every exit (the end, a stop for exit 85, a failure): the save in flight
//              committed and reported; its error rethrown.
//
// The staging buffer is allocated once, at set-up: on the CPU a copy of the writer's master and
// optimizer state (owned.size() floats each; nothing on a rank that writes nothing), on a device
// the host mirror (train/checkpoint_mirror.hpp), which only saves and loads touch. Saves are
// asynchronous when asked for (--async-save), MPI has MPI_THREAD_MULTIPLE and every node's
// staging fits in 3/4 of its available host memory; otherwise synchronous, and rank 0 says why in
// one line. Every rank decides alike.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/ckpt/async_saver.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/train/checkpoint_mirror.hpp"
#include "mpitrain/train/metrics.hpp"

namespace mpitrain {

// The share of a node's available host memory the staging copies may take.
inline constexpr double kStagingMemoryShare = 0.75;

class Checkpointer {
 public:
  // Collective over store's world; node: the ranks of this host. store: the synchronous saves',
  // and the model of the writer's (ckpt/async_saver.hpp); live: the state training updates (on
  // a device, re-pointed at mirror's host copies). log and trace record what the saves cost.
  Checkpointer(bool async, CheckpointStore& store, const CheckpointState& live,
               CheckpointMirror* mirror, Backend<float>& backend, const MpiComm& node,
               MetricsLog& log, TraceRecorder& trace);
  // Waits for the save in flight: reported committed, or on stderr not committed (rank 0).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  bool async() const { return saver_ != nullptr; }
  // The checkpoint of step m.step: name "" is step-N (CheckpointStore::save), else
  // save_as(name). Returns the seconds the caller lost (the wait for the previous save, the
  // copy, and for a synchronous save the write).
  double save(const CheckpointManifest& m, const std::string& name = "");
  void poll();  // reports a background save that has committed since
  void wait();  // the save in flight committed and reported (its failure rethrown)
  // The last save's stall plus write: what one more synchronous one would take (for
  // --exit-after-minutes).
  double last_save_seconds() const { return last_stall_ + last_write_; }
  uint64_t bytes() const { return bytes_; }  // one checkpoint's tensor data, all ranks

 private:
  const CheckpointState& stage();  // the staging copy of live, returned as the state to write
  void report(const SaveDone& done);

  CheckpointStore& store_;
  const CheckpointState& live_;
  CheckpointMirror* mirror_;
  Backend<float>& backend_;
  MetricsLog& log_;
  TraceRecorder& trace_;
  uint64_t bytes_ = 0;
  float* staging_ = nullptr;  // the CPU's copy (backend memory), or null
  std::optional<CheckpointState> staged_;
  double last_stall_ = 0.0, last_write_ = 0.0;
  std::unique_ptr<AsyncSaver> saver_;  // last: joined before the staging buffer is freed
};

}  // namespace mpitrain
