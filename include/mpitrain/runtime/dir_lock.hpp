// An exclusive lock on a run's output directory, held for the lock object's lifetime: flock(2)
// on <dir>/run.lock, which records the holder ("host H pid P since T").
//
// flock belongs to the open file: the kernel releases it when the holder dies (kill -9, a crash),
// so a lock that is free but still names a holder was left by a run that ended without releasing
// it, and is taken over with a note. A lock held by a live process (this host or, on NFS and
// Lustre with -o flock, another one) is waited for wait_seconds, then refused (UsageError naming
// the holder). A file system that has no flock (Lustre -o noflock: ENOSYS; NFS without lockd:
// ENOLCK) gets a warning and the run goes on unlocked. README "The out-dir lock" has the details.
#pragma once

#include <string>

#include "mpitrain/runtime/signals.hpp"
#include "mpitrain/runtime/unique_fd.hpp"

namespace mpitrain {

class DirLock {
 public:
  static constexpr const char* kFileName = "run.lock";

  // Creates dir (and its missing parents) if need be, then takes the lock; notes go to stderr.
  // `holder` is this process as the record names it ("host H pid P"). While it waits, a stop
  // signal (signals.hpp) ends the wait: StopRequested, with nothing left behind.
  DirLock(const std::string& dir, const std::string& holder, double wait_seconds,
          const StopSignals& signals);
  // Removes the lock file while still holding it, then the directories it created if they are
  // empty: a run refused at start-up leaves the out-dir as it found it.
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;

 private:
  void remove_created_dirs();

  std::string dir_, path_;
  std::string created_from_;  // the topmost directory this lock created, "" if none
  UniqueFd fd_;
};

}  // namespace mpitrain
