// The checkpoints directory: commit protocol, `latest`, pruning, and loading with fallback.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>
#include <vector>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/io/file_kind.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/build_id.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

constexpr const char* kLatest = "latest";
constexpr std::string_view kPruned = ".pruned";  // a step directory being removed

// Runs fn on rank 0 once every rank has got here (a rank killed before never lets it run), and
// agrees on its outcome.
void on_root(const MpiComm& world, const std::function<void()>& fn) {
  MPI_CHECK(MPI_Barrier(world.get()));
  all_or_none(world, [&] {
    if (world.rank() == 0) fn();
  });
}

// Rank 0's value of text on every rank.
void broadcast(const MpiComm& world, std::string& text) {
  int size = static_cast<int>(text.size());
  MPI_CHECK(MPI_Bcast(&size, 1, MPI_INT, 0, world.get()));
  text.resize(size);
  MPI_CHECK(MPI_Bcast(text.data(), size, MPI_CHAR, 0, world.get()));
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// Committed step directories (step-N, or step-N.old where only that is left), newest first.
std::vector<std::string> step_dirs(const std::string& dir) {
  std::map<int64_t, std::string, std::greater<>> found;
  if (!fs::is_directory(dir)) return {};
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    const bool old = name.ends_with(".old");
    if (old) name.resize(name.size() - 4);
    const std::optional<int64_t> step = parse_step_dir(name);
    if (step && e.is_directory() && (!old || !found.contains(*step)))
      found[*step] = e.path().string();
  }
  std::vector<std::string> out;
  for (const auto& [step, path] : found) out.push_back(path);
  return out;
}

// UsageError unless `latest` is absent or a regular file: anything else (a directory, a link, a
// FIFO, which would block the read) was put there by hand, and a save could not replace it.
void require_plain_latest(const std::string& dir) {
  const fs::path latest = fs::path(dir) / kLatest;
  std::error_code ec;
  const fs::file_status status = fs::symlink_status(latest, ec);
  if (!fs::exists(status) || fs::is_regular_file(status)) return;
  const std::string what = fs::is_symlink(status) ? "is a symbolic link, not a regular file"
                                                  : not_regular_file_reason(latest.string());
  throw UsageError(latest.string() + " " + what +
                   ": the checkpoint store writes it as a one-line file naming the newest "
                   "checkpoint; move it away (nothing was changed), then resume");
}

}  // namespace

std::vector<std::string> checkpoint_candidates(const std::string& dir, std::string& problem) {
  require_plain_latest(dir);
  std::vector<std::string> out;
  const fs::path latest = fs::path(dir) / kLatest;
  if (fs::exists(latest)) {
    std::string name;
    std::getline(std::ifstream(latest), name);
    // A plain name in dir only: never a path into another run.
    const bool plain =
        !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
    const std::string found = plain ? resolve_dir((fs::path(dir) / name).string()) : "";
    if (found.empty())
      problem = latest.string() + " names '" + name + "', which is not a checkpoint in " + dir;
    else
      out.push_back(found);
  }
  for (const std::string& path : step_dirs(dir))
    if (std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
  return out;
}

namespace {

// Renames the committed step directories beyond the newest keep_last (keeping `committed`, a
// name, always) to step-N.pruned, a name the loader never takes, and makes that durable before
// anything is deleted: a kill while one is deleted leaves a leftover, not a half checkpoint.
void retire_old_steps(const std::string& dir, int keep_last, const std::string& committed) {
  if (keep_last <= 0) return;
  int kept = 1;  // committed
  bool renamed = false;
  for (const std::string& path : step_dirs(dir)) {
    if (fs::path(path).filename() == committed || path.ends_with(".old")) continue;
    if (kept < keep_last) {
      ++kept;
      continue;
    }
    const std::string pruned = path + std::string(kPruned);
    fs::remove_all(pruned);  // a leftover of the same name would make the rename fail
    fs::rename(path, pruned);
    renamed = true;
  }
  if (renamed) fsync_path(dir);
}

// step-N.tmp (a save cut short) or step-N.pruned (a prune cut short, or just retired).
bool is_leftover(const std::string& name) {
  for (const std::string_view suffix : {std::string_view(".tmp"), kPruned})
    if (name.ends_with(suffix) && parse_step_dir(name.substr(0, name.size() - suffix.size())))
      return true;
  return false;
}

// Deletes every leftover directory (listed first: no removal while the directory is read).
void remove_leftovers(const std::string& dir) {
  std::vector<fs::path> found;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (is_leftover(e.path().filename().string())) found.push_back(e.path());
  for (const fs::path& path : found) fs::remove_all(path);
}

}  // namespace

CheckpointStore::CheckpointStore(std::string dir, const MpiComm& world, int keep_last,
                                 FaultPlan faults)
    : dir_(std::move(dir)), world_(world), keep_last_(keep_last), faults_(std::move(faults)) {}

std::string CheckpointStore::commit(const std::string& name, const CheckpointManifest& given,
                                    const CheckpointState& s) {
  CheckpointManifest m = given;
  m.format_version = kCheckpointFormatVersion;
  m.optimizer = s.optimizer;
  m.build_id = build_id();
  m.wall_time = world_.rank() == 0 ? utc_now() : "";
  broadcast(world_, m.wall_time);  // attributes are collective: the same value everywhere
  const std::string tmp = (fs::path(dir_) / (name + ".tmp")).string();
  const std::string final = (fs::path(dir_) / name).string();
  const std::string file = (fs::path(tmp) / kCheckpointFile).string();
  const int rank = world_.rank();

  as_agreed(name, [&] {
    on_root(world_, [&] {
      // Created by the first save; gone later, it was removed or its file system unmounted:
      // made again, the checkpoints would go where no one looks (the mount point's disk).
      if (!fs::is_directory(dir_) && !saved_.empty())
        throw_file_error(ENOENT, "writing", dir_ + " (it held this run's " + saved_ +
                                                ": removed, or its file system unmounted)");
      fs::create_directories(dir_);
      fs::remove_all(tmp);
      fs::create_directory(tmp);
    });
    write_checkpoint_file(file, "checkpoint " + name, world_, m, s, faults_);
    faults_.at("close", rank, m.step);
    on_root(world_, [&] {
      release_reserved_space(file);
      fsync_path(file);
      fsync_path(tmp);
    });
    on_root(world_, [&] { replace_dir(tmp, final); });
  }, tmp);
  faults_.at("rename", rank, m.step);
  saved_ = name;
  return final;
}

void CheckpointStore::as_agreed(const std::string& name, const std::function<void()>& steps,
                                const std::string& leftover) {
  try {
    steps();
  } catch (const Error& e) {  // agreed: every step is
    if (world_.rank() == 0 && !leftover.empty()) {
      std::error_code ignored;  // the failure is the news, not whether this worked
      fs::remove_all(leftover, ignored);
    }
    throw AgreedError("checkpoint " + name + ": " + e.what() +
                      (saved_.empty() ? "" : "; the newest checkpoint is " + saved_));
  }
}

std::string CheckpointStore::save(const CheckpointManifest& m, const CheckpointState& s) {
  const std::string name = step_dir_name(m.step);
  const std::string path = commit(name, m, s);
  const std::string latest = (fs::path(dir_) / kLatest).string();
  const int rank = world_.rank();
  // Two on_root steps with the fault point between them, so that every rank's "latest" kill
  // falls where rank 0's does: latest.tmp durable, `latest` still naming the previous step.
  as_agreed(name, [&] {
    on_root(world_, [&] { write_file_synced(latest + ".tmp", name + "\n"); });
    faults_.at("latest", rank, m.step);
    on_root(world_, [&] {
      rename_durably(latest + ".tmp", latest);
      retire_old_steps(dir_, keep_last_, name);
    });
    faults_.at("prune", rank, m.step);  // the retired steps are step-N.pruned, not yet deleted
    on_root(world_, [&] { remove_leftovers(dir_); });
  }, latest + ".tmp");
  return path;
}

std::string CheckpointStore::save_as(const std::string& name, const CheckpointManifest& m,
                                     const CheckpointState& s) {
  require(!name.empty() && name.find('/') == std::string::npos && name != kLatest &&
              !parse_step_dir(name),
          "checkpoint name '" + name + "' must be a plain name other than latest and step-N");
  return commit(name, m, s);
}

std::optional<CheckpointManifest> CheckpointStore::load_latest(const CheckpointState& s,
                                                               bool fresh_over_damaged) {
  std::string list, problem;
  on_root(world_, [&] {
    for (const std::string& path : checkpoint_candidates(dir_, problem)) list += path + "\n";
  });
  if (world_.rank() == 0 && !problem.empty())
    std::fprintf(stderr, "checkpoint: %s; scanning %s\n", problem.c_str(), dir_.c_str());
  broadcast(world_, list);
  std::string damaged;  // their names, for the message
  for (size_t begin = 0, end; (end = list.find('\n', begin)) != std::string::npos;
       begin = end + 1) {
    const std::string path = list.substr(begin, end - begin);
    try {
      return read_checkpoint(path, world_, s);
    } catch (const UsageError&) {
      throw;  // another model: no older checkpoint would fit either
    } catch (const Error& e) {
      if (world_.rank() == 0)
        std::fprintf(stderr, "checkpoint: %s; trying an older one\n", e.what());
      damaged += (damaged.empty() ? "" : ", ") + fs::path(path).filename().string();
    }
  }
  if (damaged.empty()) return std::nullopt;
  if (fresh_over_damaged) {
    if (world_.rank() == 0)
      std::fprintf(stderr,
                   "checkpoint: every checkpoint in %s is damaged; starting fresh over "
                   "them (--overwrite)\n",
                   dir_.c_str());
    return std::nullopt;
  }
  throw UsageError("every checkpoint in " + dir_ + " is damaged (" + damaged +
                   ", each named above); nothing was removed: look at them with ckpt-inspect "
                   "--verify, move " +
                   dir_ + " aside, or pass --overwrite to start fresh over them");
}

bool CheckpointStore::load_latest_loads_or_stops(bool fresh_over_damaged) {
  int found = 0;  // a checkpoint to try
  on_root(world_, [&] {
    std::string problem;
    found = checkpoint_candidates(dir_, problem).empty() ? 0 : 1;
  });
  MPI_CHECK(MPI_Bcast(&found, 1, MPI_INT, 0, world_.get()));
  return found == 1 && !fresh_over_damaged;
}

CheckpointManifest CheckpointStore::load(const std::string& path, const CheckpointState& s) {
  std::string dir;
  on_root(world_, [&] {
    require_plain_latest(dir_);  // the next save replaces it
    dir = resolve_dir(path);
  });
  broadcast(world_, dir);
  require(!dir.empty(), "checkpoint directory '" + path + "' does not exist");
  try {
    return read_checkpoint(dir, world_, s);
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError("cannot resume from " + path + ": " + e.what());
  }
}

}  // namespace mpitrain
