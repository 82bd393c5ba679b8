#include "mpitrain/monitor/output_dir.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// Why nothing can be created in the directory dir, "" if something can: a probe directory made
// and removed at once. access(2) would not do: root passes it on /proc and read-only mounts.
std::string cannot_create_in(const fs::path& dir) {
  std::string probe = (dir / ".mpitrain-probe-XXXXXX").string();
  if (::mkdtemp(probe.data()) == nullptr) return std::strerror(errno);
  if (::rmdir(probe.c_str()) != 0) return "cannot remove " + probe + ": " + std::strerror(errno);
  return "";
}

// `dir` must be a directory that exists, or could be created: its nearest existing ancestor is
// a directory something can be created in; `what` opens the message.
void require_room_in(const fs::path& dir, const std::string& what) {
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  require(!ec, what + ": " + ec.message());
  while (!fs::exists(p, ec) && p.has_relative_path()) p = p.parent_path();
  require(fs::is_directory(p, ec), what + ": " + p.string() + " exists and is not a directory");
  const std::string why = cannot_create_in(p);
  require(why.empty(), what + ": cannot write in " + p.string() + ": " + why);
}

}  // namespace

void require_creatable_dir(const std::string& dir, const std::string& option) {
  if (dir.empty()) return;
  require_room_in(dir, option + " " + dir);
}

void require_writable_file(const std::string& file, const std::string& option) {
  if (file.empty()) return;
  std::error_code ec;
  const fs::path path(file);
  require(path.has_filename() && !fs::is_directory(path, ec),
          option + " " + file + " is a directory; give a file name");
  require_room_in(path.parent_path().empty() ? fs::path(".") : path.parent_path(),
                  option + " " + file);
}

void require_new_dir(const std::string& dir, const std::string& option) {
  if (dir.empty()) return;
  std::error_code ec;
  const fs::path path = fs::absolute(dir, ec);
  require(!ec, option + " " + dir + ": " + ec.message());
  if (fs::exists(path, ec)) {
    require(fs::is_directory(path, ec) && fs::is_empty(path, ec),
            option + " " + dir + " exists and is not an empty directory: choose another");
    return;
  }
  require_room_in(path.parent_path(), option + " " + dir);
}

void create_parent_dirs(const std::string& path) {
  const fs::path parent = fs::absolute(path).parent_path();
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw Error("cannot create " + parent.string() + " for " + path + ": " + ec.message());
}

}  // namespace mpitrain
