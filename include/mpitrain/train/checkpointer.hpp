// The run's saves: each one's staging copy, its write (now, or by the writer thread of
// ckpt/async_saver.hpp), and what it cost, for the metrics, the trace and the console.
//
//   save(m)    the save in flight (if any) waited for; the state copied into the staging buffer
//              (fault phase "staged"); then written in the background (async) or now (sync).
//              What the step loop lost is reported as checkpoint_stall_ms.
//   poll()     at every step end: a background save that has committed is reported
//              (checkpoint_write_ms, checkpoint_bytes, "saved checkpoint step N ..."). While a
//              save is in flight the ranks agree (one all-reduce) that every writer is done, so
//              that a failed save throws at the same step on every rank, not at the next save.
//   wait()     before every exit (the end, a stop for exit 85, a failure): the save in flight
//              committed and reported; its error rethrown.
// A save that fails (a full disk, a directory gone: ckpt/checkpoint.hpp) throws AgreedError on
// every rank alike: the run ends with one message and exit 1.
//
// The staging buffer is allocated once: on the CPU a copy of the writer's master and optimizer
// state (owned.size() floats each; nothing on a rank that writes nothing), made at set-up; on a
// device the writers' host copies (train/checkpoint_mirror.hpp, MirrorUse::Save), which only
// saves touch, made at set-up where saves are planned, else at a stop's save (SIGTERM), agreed by
// every rank. Each node's host copies must fit in 3/4 of its available host memory
// (plan_saves: otherwise a UsageError where saves are planned, a warning where not). Saves are
// asynchronous when asked for (--async-save), MPI has MPI_THREAD_MULTIPLE and every node's
// staging fits; otherwise synchronous, and rank 0 says why in one line. Every rank decides alike.
//
// --async-save auto (the default) writes in the background where the writer has a CPU to itself:
// a GPU run, one rank, or ranks whose threads leave part of each host's CPUs free. Where the
// ranks' threads take every CPU of a host, a background save's writers (one a rank, which meet
// in collectives) wait for CPUs the training holds. On 2 ranks x 1 thread on 2 cores (AMD EPYC
// Zen 3), the wall time a save added to a run (two runs each, none / sync / background): in the
// background 1.2-1.4 s against a synchronous save's 0.00-0.05 s for a checkpoint of 0.001 GB,
// 0.44-0.64 s against 0.15-0.47 s for 0.06 GB, 1.3-1.7 s against 1.1-1.2 s for 0.35 GB; for
// GPT-2 small's 1.49 GB about 4.0 s against 5.1 s (bench/async_save.sh on a 2-core Intel Xeon VM,
// family 6 model 167, in the note of issue 21). There
// saves are synchronous until one takes kSlowSave seconds or more (agreed: the slowest rank's),
// and in the background from the next one on.
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
// --async-save auto without a CPU for the writer: a synchronous save this slow (s) turns the
// later ones to the background (see above).
inline constexpr double kSlowSave = 2.0;

// What `floats` on each rank come to on the node that holds the most of them, and the least host
// memory any rank sees available: agreed by every rank (collective over world; node: this
// rank's host's ranks).
struct NodeMemory {
  double need = 0, available = 0;
  bool fits() const { return need <= kStagingMemoryShare * available; }
  std::string text() const;  // "12.00 GB of host memory on a node, 3/4 of the 20.00 GB available"
};
NodeMemory node_memory(size_t floats, const MpiComm& node, const MpiComm& world);

// What the run's saves need, given by the Trainer.
struct SaveOptions {
  bool planned = false;   // --save-interval, --save-best, --exit-at-step, --exit-after-minutes
  bool async = false;     // --async-save true or auto where saves are periodic
  bool mirrored = false;  // the state lives on a device: saves go through host copies
  bool async_auto = false;  // --async-save auto
  // This rank's threads leave part of its share of the host's CPUs free (or it trains on a
  // device): a background writer has a CPU to itself.
  bool writer_cpu = true;
};

// How the saves stage, decided at set-up by every rank alike, before anything is written.
struct SavePlan {
  bool mirrored = false;      // through a device's host copies (SaveOptions::mirrored)
  bool async = false;         // in the background (else synchronous)
  bool async_when_slow = false;  // synchronous until a save takes kSlowSave s, then background
  bool mirror_now = false;    // the host copies made at set-up (else at a stop's save)
  size_t staging_floats = 0;  // this rank's staging: the CPU's copy, or the host copies
  std::string note;           // rank 0's start-up line ("" none)
};
// Collective over world. UsageError when planned saves' host copies do not fit a node.
SavePlan plan_saves(const SaveOptions& options, const CheckpointState& live, const MpiComm& node,
                    const MpiComm& world);

class Checkpointer {
 public:
  // Collective over store's world. plan: plan_saves's. store: the synchronous saves', and the
  // model of the writer's (ckpt/async_saver.hpp); live: the state training updates (on a
  // device where plan says mirrored: saved through host copies). log and trace record what the
  // saves cost.
  Checkpointer(const SavePlan& plan, CheckpointStore& store, const CheckpointState& live,
               Backend<float>& backend, MetricsLog& log, TraceRecorder& trace);
  // Waits for the save in flight: reported committed, or on stderr not committed (rank 0).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  bool async() const { return saver_ != nullptr; }  // the saves go in the background now
  // The checkpoint of step m.step: name "" is step-N (CheckpointStore::save), else
  // save_as(name). Returns the seconds the caller lost (the wait for the previous save, the
  // copy, and for a synchronous save the write).
  double save(const CheckpointManifest& m, const std::string& name = "");
  void poll();  // reports a background save that has committed since (collective, see above)
  void wait();  // the save in flight committed and reported (its failure rethrown)
  // The last save's stall plus write: what one more synchronous one would take (for
  // --exit-after-minutes).
  double last_save_seconds() const { return last_stall_ + last_write_; }
  uint64_t bytes() const { return bytes_; }  // one checkpoint's tensor data, all ranks

 private:
  void make_mirror();  // the host copies (collective: made on every rank or on none)
  // The staging copy (staging_floats on this rank) and the writer (collective)
  void start_background(size_t staging_floats);
  const CheckpointState& stage();  // the staging copy of live, returned as the state to write
  void report(const SaveDone& done);

  CheckpointStore& store_;
  const CheckpointState& live_;
  bool mirrored_;
  std::optional<CheckpointMirror> mirror_;  // a device's host copies, once made
  Backend<float>& backend_;
  MetricsLog& log_;
  TraceRecorder& trace_;
  uint64_t bytes_ = 0;
  float* staging_ = nullptr;  // the CPU's copy (backend memory), or null
  std::optional<CheckpointState> staged_;
  double last_stall_ = 0.0, last_write_ = 0.0;
  // SavePlan::async_when_slow: the staging floats of the background saves, until a save is slow
  std::optional<size_t> when_slow_;
  std::unique_ptr<AsyncSaver> saver_;  // last: joined before the staging buffer is freed
};

}  // namespace mpitrain
