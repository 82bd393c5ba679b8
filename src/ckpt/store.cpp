// The checkpoints directory: commit protocol, `latest`, pruning, and loading with fallback.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <string_view>
#include <vector>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/runtime/agree.hpp"

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

// Where to look, in order: the directory `latest` names, then the step directories newest first.
std::vector<std::string> candidates(const std::string& dir) {
  std::vector<std::string> out;
  const fs::path latest = fs::path(dir) / kLatest;
  if (fs::exists(latest)) {
    std::string name;
    std::getline(std::ifstream(latest), name);
    const std::string found = name.empty() || name.find('/') != std::string::npos
                                  ? ""
                                  : resolve_dir((fs::path(dir) / name).string());
    if (found.empty())
      std::fprintf(stderr, "checkpoint: %s names '%s', which is not a checkpoint; scanning %s\n",
                   latest.c_str(), name.c_str(), dir.c_str());
    else
      out.push_back(found);
  }
  for (const std::string& path : step_dirs(dir))
    if (std::find(out.begin(), out.end(), path) == out.end()) out.push_back(path);
  return out;
}

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
  m.build_id = MPITRAIN_BUILD_ID;
  m.wall_time = world_.rank() == 0 ? utc_now() : "";
  broadcast(world_, m.wall_time);  // attributes are collective: the same value everywhere
  const std::string tmp = (fs::path(dir_) / (name + ".tmp")).string();
  const std::string final = (fs::path(dir_) / name).string();
  const std::string file = (fs::path(tmp) / kCheckpointFile).string();
  const int rank = world_.rank();

  on_root(world_, [&] {
    fs::create_directories(dir_);
    fs::remove_all(tmp);
    fs::create_directory(tmp);
  });
  agree_on(world_, "cannot write " + file,
           [&] { write_checkpoint_file(file, world_, m, s, faults_); });
  faults_.at("close", rank, m.step);
  on_root(world_, [&] {
    fsync_path(file);
    fsync_path(tmp);
  });
  on_root(world_, [&] { replace_dir(tmp, final); });
  faults_.at("rename", rank, m.step);
  return final;
}

std::string CheckpointStore::save(const CheckpointManifest& m, const CheckpointState& s) {
  const std::string name = step_dir_name(m.step);
  const std::string path = commit(name, m, s);
  const std::string latest = (fs::path(dir_) / kLatest).string();
  const int rank = world_.rank();
  // Two on_root steps with the fault point between them, so that every rank's "latest" kill
  // falls where rank 0's does: latest.tmp durable, `latest` still naming the previous step.
  on_root(world_, [&] { write_file_synced(latest + ".tmp", name + "\n"); });
  faults_.at("latest", rank, m.step);
  on_root(world_, [&] {
    rename_durably(latest + ".tmp", latest);
    retire_old_steps(dir_, keep_last_, name);
  });
  faults_.at("prune", rank, m.step);  // the retired steps are step-N.pruned, not yet deleted
  on_root(world_, [&] { remove_leftovers(dir_); });
  return path;
}

std::string CheckpointStore::save_as(const std::string& name, const CheckpointManifest& m,
                                     const CheckpointState& s) {
  require(!name.empty() && name.find('/') == std::string::npos && name != kLatest &&
              !parse_step_dir(name),
          "checkpoint name '" + name + "' must be a plain name other than latest and step-N");
  return commit(name, m, s);
}

std::optional<CheckpointManifest> CheckpointStore::load_latest(const CheckpointState& s) {
  std::string list;
  on_root(world_, [&] {
    for (const std::string& path : candidates(dir_)) list += path + "\n";
  });
  broadcast(world_, list);
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
    }
  }
  return std::nullopt;
}

CheckpointManifest CheckpointStore::load(const std::string& path, const CheckpointState& s) {
  std::string dir;
  on_root(world_, [&] { dir = resolve_dir(path); });
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
