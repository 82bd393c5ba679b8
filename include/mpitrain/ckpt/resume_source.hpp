// What an explicit --resume PATH names: one checkpoint, or a directory of them, and the run it
// belongs to. Found on one rank with serial HDF5 (no MPI): every rank finds the same.
#pragma once

#include <optional>
#include <string>

#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

struct ResumeSource {
  std::string checkpoints;      // a checkpoints directory: its newest valid checkpoint, or ""
                                // (the newest committed one first: newer_than_latest)
  std::string step;             // else this one checkpoint directory (step-N, best, ...)
  std::string run_dir;          // the run directory above them ("" when there is none)
  CheckpointManifest manifest;  // of the checkpoint a load tries first
};

// path: a run directory (holding checkpoints/), a checkpoints directory (`latest`, step-N/), a
// checkpoint directory (holding checkpoint.h5, or only its .old) or that checkpoint.h5. UsageError
// saying what was expected when it is none of these, and naming the file when no manifest in it
// can be read (the loader then reports the data's damage as it always does).
ResumeSource find_resume_source(const std::string& path);

// The same forms as find_resume_source, without reading any manifest (ckpt-inspect shows a
// damaged one): UsageError saying what was expected when path is none of them.
ResumeSource locate_checkpoints(const std::string& path);

// A committed checkpoint in a checkpoints directory (step-N/, best/ or any other named one) of a
// higher step than the one `latest` leads to (the first readable manifest in load_latest's
// order): a save cut short after best/ was written, or between its commit and `latest`.
struct NewerCheckpoint {
  std::string dir;
  int64_t step = 0;
  int64_t latest_step = -1;  // the step `latest` leads to; -1 when no manifest there reads
  CheckpointManifest manifest;
  // "<dir> holds step 50, newer than step 25 that <checkpoints>/latest leads to (...)"
  std::string note(const std::string& checkpoints) const;
};
// The newest such checkpoint by its manifest (serial HDF5; every rank finds the same), nullopt
// when there is none (the usual case: `latest` names the newest). A resume loads it first.
std::optional<NewerCheckpoint> newer_than_latest(const std::string& checkpoints);

// The manifest of the checkpoint a load of the checkpoints directory tries first (the newer one
// of newer_than_latest, else the first readable in load_latest's order); nullopt when none reads
// (no checkpoint, or all damaged: damage then lists why, "; " between them). UsageError for a
// `latest` that is not a regular file.
std::optional<CheckpointManifest> first_manifest(const std::string& checkpoints,
                                                 std::string& damage);

}  // namespace mpitrain
