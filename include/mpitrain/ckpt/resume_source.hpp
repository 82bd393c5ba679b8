// What an explicit --resume PATH names: one checkpoint, or a directory of them, and the run it
// belongs to. Found on one rank with serial HDF5 (no MPI): every rank finds the same.
#pragma once

#include <string>

#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

struct ResumeSource {
  std::string checkpoints;      // a checkpoints directory: its newest valid checkpoint, or ""
  std::string step;             // else this one checkpoint directory (step-N, best, ...)
  std::string run_dir;          // the run directory above them ("" when there is none)
  CheckpointManifest manifest;  // of the checkpoint a load tries first
};

// path: a run directory (holding checkpoints/), a checkpoints directory (`latest`, step-N/), a
// checkpoint directory (holding checkpoint.h5, or only its .old) or that checkpoint.h5. UsageError
// saying what was expected when it is none of these, and naming the file when no manifest in it
// can be read (the loader then reports the data's damage as it always does).
ResumeSource find_resume_source(const std::string& path);

}  // namespace mpitrain
