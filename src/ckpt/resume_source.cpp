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

ResumeSource locate_checkpoints(const std::string& path) {
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
  return s;
}

std::optional<NewerCheckpoint> newer_than_latest(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::string problem;
  int64_t latest_step = -1;
  for (const std::string& candidate : checkpoint_candidates(dir, problem)) {
    try {
      latest_step = manifest_in(candidate).step;
      break;
    } catch (const Error&) {
      continue;  // the load reports it when it gets there
    }
  }
  std::optional<NewerCheckpoint> newest;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory(ec) || name.ends_with(".tmp") || name.ends_with(".pruned")) continue;
    // <name>.old counts only where <name> is gone (a replace cut short: resolve_dir's rule).
    if (name.ends_with(".old") &&
        fs::exists(entry.path().parent_path() / name.substr(0, name.size() - 4), ec))
      continue;
    try {
      const CheckpointManifest m = manifest_in(entry.path().string());
      check_step_matches_dir(m, entry.path().string());
      if (m.step > latest_step && (!newest || m.step > newest->step))
        newest = NewerCheckpoint{entry.path().string(), m.step, latest_step, m};
    } catch (const Error&) {
      continue;  // damaged or no checkpoint: not a candidate
    }
  }
  return newest;
}

std::string NewerCheckpoint::note(const std::string& checkpoints) const {
  return dir + " holds step " + std::to_string(step) + ", newer than " +
         (latest_step < 0 ? std::string("any checkpoint") : "step " + std::to_string(latest_step)) +
         " that " + (fs::path(checkpoints) / "latest").string() +
         " leads to (a save cut short, or a best/ saved after it)";
}

std::optional<CheckpointManifest> first_manifest(const std::string& checkpoints,
                                                 std::string& damage) {
  if (std::optional<NewerCheckpoint> newer = newer_than_latest(checkpoints))
    return std::move(newer->manifest);
  std::string problem;
  for (const std::string& dir : checkpoint_candidates(checkpoints, problem)) {
    try {
      return manifest_in(dir);
    } catch (const Error& e) {
      damage += std::string(damage.empty() ? "" : "; ") + e.what();
    }
  }
  return std::nullopt;
}

ResumeSource find_resume_source(const std::string& path) {
  ResumeSource s = locate_checkpoints(path);
  if (!s.step.empty()) {
    try {
      s.manifest = manifest_in(s.step);
    } catch (const Error& e) {
      throw UsageError("cannot resume from " + path + ": " + e.what());
    }
    return s;
  }
  std::string damage;
  if (std::optional<CheckpointManifest> m = first_manifest(s.checkpoints, damage)) {
    s.manifest = std::move(*m);
    return s;
  }
  require(!damage.empty(), "'" + path + "' holds no checkpoint: " + kExpected);
  throw UsageError("no checkpoint in " + s.checkpoints + " has a readable manifest (" + damage +
                   "); nothing was changed");
}

}  // namespace mpitrain
