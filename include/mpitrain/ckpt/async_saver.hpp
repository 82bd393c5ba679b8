// Checkpoints written by a thread of their own while training goes on (--async-save).
//
//   main thread:  save N: stage, start ── step N+1 ── step N+2 ── ... save N+k: wait, stage ...
//   writer:                 └─ CheckpointStore::save(N): write, close, fsync, rename, latest,
//                              prune ─┘ (done; the main thread collects it at the next wait)
//
// start() hands the writer a CheckpointState whose buffers nothing else touches until the save
// is collected (the staging copy of train/checkpointer.hpp) and returns at once. The thread runs
// today's whole commit protocol (ckpt/checkpoint.hpp, fault points included) through a
// CheckpointStore over a duplicate of the world communicator, so its collectives never meet the
// training's. One save is in flight at a time: start() requires the previous one collected
// (wait()). The main thread uses no HDF5 call while a save is in flight other than the token
// files' reads, which take lock_hdf5() (io/hdf5.hpp) as the writer does for each of its calls.
//
// Needs MPI_THREAD_MULTIPLE (threads_supported()). Every rank of the world takes part in every
// save, in the same order.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

// What a committed save did.
struct SaveDone {
  int64_t step = 0;
  std::string name;  // "step-00000010", "best"
  std::string dir;   // the committed directory
  std::chrono::steady_clock::time_point began;
  double seconds = 0;      // began to commit
  double cpu_seconds = 0;  // of that, the saving thread's CPU time (user + system)
};

// s saved by store on this thread, as CheckpointStore::save (name "") or save_as(name) would
// save it, timed. Throws what the store throws.
SaveDone save_now(CheckpointStore& store, const CheckpointManifest& m, const CheckpointState& s,
                  const std::string& name);

class AsyncSaver {
 public:
  // Whether this MPI lets two threads make calls at once (MPI_THREAD_MULTIPLE).
  static bool threads_supported();

  // Collective over like's world: the writer's store is like's (directory, keep_last, faults)
  // over a duplicate of that world.
  explicit AsyncSaver(const CheckpointStore& like);
  ~AsyncSaver();  // waits for a save in flight (collect it first with wait() to know how it went)
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Starts writing s as CheckpointStore::save (name "") or save_as(name) would. s's buffers
  // must stay as they are until wait() has returned.
  void start(const CheckpointManifest& m, const CheckpointState& s, const std::string& name);
  bool in_flight() const { return writer_.joinable(); }  // started, not yet collected
  bool finished() const { return finished_.load(std::memory_order_acquire); }  // wait() is quick
  // Collects the save in flight (nullopt if none), blocking until it is committed. A failure is
  // rethrown here (as the synchronous save would have thrown it), every rank alike.
  std::optional<SaveDone> wait();

 private:
  MpiComm world_;  // the writer's own duplicate
  CheckpointStore store_;
  std::thread writer_;
  std::atomic<bool> finished_{false};
  SaveDone done_;
  std::exception_ptr error_;
};

}  // namespace mpitrain
