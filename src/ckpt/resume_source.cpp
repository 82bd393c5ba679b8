// The forms of --resume PATH, and the manifest of the checkpoint it means.
#include "mpitrain/ckpt/resume_source.hpp"

#include <filesystem>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/io/file_kind.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

const char* const kExpected =
    "--resume takes auto, a run directory (holding checkpoints/), a checkpoints directory "
    "(latest, step-N/), a step-N directory or its checkpoint.h5";

// The name the trainer gives the directory of a run's checkpoints.
constexpr const char* kCheckpointsDir = "checkpoints";

CheckpointManifest manifest_in(const std::string& dir) {
  const std::string path = (fs::path(dir) / kCheckpointFile).string();
  if (const std::string why = not_regular_file_reason(path); !why.empty())
    throw Error(path + ": " + why);  // a FIFO would block the open
  const H5Handle file = open_file(path);
  return read_manifest(file.get());
}

// The run directory that holds checkpoints directory dir ("" unless it has the trainer's name).
std::string run_of(const fs::path& dir) {
  std::error_code ec;
  const fs::path abs = fs::absolute(dir, ec).lexically_normal();
  const fs::path named = abs.has_filename() ? abs : abs.parent_path();
  return named.filename() == kCheckpointsDir ? named.parent_path().string() : "";
}

}  // namespace

ResumeSource find_resume_source(const std::string& path) {
  std::error_code ec;
  ResumeSource s;
  const fs::path p(path);
  if (fs::is_regular_file(p, ec) && p.filename() == kCheckpointFile) {
    s.step = p.parent_path().empty() ? "." : p.parent_path().string();
  } else if (const std::string dir = resolve_dir(path); dir.empty()) {
    throw UsageError("checkpoint directory '" + path + "' does not exist: " + kExpected);
  } else if (fs::exists(fs::symlink_status(fs::path(dir) / kCheckpointFile, ec))) {
    s.step = dir;
  } else {
    const bool run = fs::is_directory(p / kCheckpointsDir, ec);
    s.checkpoints = run ? (p / kCheckpointsDir).string() : dir;
  }
  const fs::path step = fs::absolute(s.step, ec).lexically_normal();
  s.run_dir =
      run_of(s.step.empty() ? fs::path(s.checkpoints)
                            : (step.has_filename() ? step : step.parent_path()).parent_path());
  if (!s.step.empty()) {
    try {
      s.manifest = manifest_in(s.step);
    } catch (const Error& e) {
      throw UsageError("cannot resume from " + path + ": " + e.what());
    }
    return s;
  }
  std::string problem, damage;
  for (const std::string& dir : checkpoint_candidates(s.checkpoints, problem)) {
    try {
      s.manifest = manifest_in(dir);
      return s;
    } catch (const Error& e) {
      damage += std::string(damage.empty() ? "" : "; ") + e.what();
    }
  }
  require(!damage.empty(), "'" + path + "' holds no checkpoint: " + kExpected);
  throw UsageError("no checkpoint in " + s.checkpoints + " has a readable manifest (" + damage +
                   "); nothing was changed");
}

}  // namespace mpitrain
