#include "mpitrain/runtime/dir_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <thread>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  MPITRAIN_THROW(what + " " + path + ": " + std::strerror(err));
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  char text[32] = "?";
  if (gmtime_r(&now, &tm) != nullptr) std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// "a/b/" and "a/b" alike, so that parent_path climbs one directory at a time.
fs::path normal_dir(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  return p.has_filename() ? p : p.parent_path();
}

// The lock file's first line: its holder, "" for a file no holder has written yet.
std::string read_record(int fd, const std::string& path) {
  char buf[512];
  const ssize_t n = ::pread(fd, buf, sizeof buf, 0);
  if (n < 0) fail("cannot read", path, errno);
  const std::string text(buf, static_cast<size_t>(n));
  return text.substr(0, text.find('\n'));
}

void write_record(int fd, const std::string& path, const std::string& record) {
  const std::string line = record + "\n";
  if (::ftruncate(fd, 0) != 0) fail("cannot truncate", path, errno);
  if (::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size()))
    fail("cannot write", path, errno);
  if (::fsync(fd) != 0) fail("cannot sync", path, errno);  // other hosts read it from the server
}

// Whether fd is still the file at path: a holder that let go unlinked it, and a lock on the
// unlinked file would exclude no one.
bool names_file(int fd, const std::string& path) {
  struct stat open_file {};
  struct stat named {};
  if (::fstat(fd, &open_file) != 0) fail("cannot stat", path, errno);
  if (::stat(path.c_str(), &named) != 0) {
    if (errno == ENOENT) return false;
    fail("cannot stat", path, errno);
  }
  return open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
}

// flock's errors that mean "this file system does not lock" rather than "held".
bool cannot_lock_here(int err) { return err == ENOSYS || err == ENOLCK || err == EOPNOTSUPP; }

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& holder, double wait_seconds,
                 const StopSignals& signals)
    : dir_(dir), path_((fs::path(dir) / kFileName).string()) {
  std::error_code ec;
  fs::path missing;
  for (fs::path p = normal_dir(dir); !p.empty() && !fs::exists(p, ec); p = p.parent_path()) {
    missing = p;
    if (p == p.parent_path()) break;
  }
  fs::create_directories(dir, ec);
  require(!ec, "cannot create out-dir " + dir + ": " + ec.message());
  created_from_ = missing.string();
  try {
    const auto start = std::chrono::steady_clock::now();
    bool told = false;
    for (;;) {
      fd_ = UniqueFd(::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
      if (fd_.get() < 0) throw UsageError("cannot open " + path_ + ": " + std::strerror(errno));
      if (::flock(fd_.get(), LOCK_EX | LOCK_NB) == 0) {
        if (names_file(fd_.get(), path_)) break;
        continue;  // released and removed meanwhile: lock the file that is there now
      }
      const int err = errno;
      if (err == EINTR) continue;
      if (cannot_lock_here(err)) {
        std::fprintf(stderr,
                     "out-dir lock: %s: %s; running WITHOUT the lock (a second run in this "
                     "out-dir would corrupt this one)\n",
                     path_.c_str(), std::strerror(err));
        break;
      }
      if (err != EWOULDBLOCK) fail("cannot lock", path_, err);
      std::string held_by = read_record(fd_.get(), path_);
      if (held_by.empty()) held_by = "a process that has not written its name yet";
      const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
      if (waited.count() >= wait_seconds) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", wait_seconds);
        throw UsageError("out-dir " + dir + " is in use by another run: " + held_by + " holds " +
                         path_ + " (waited " + seconds + " s, --lock-wait)");
      }
      if (signals.requested()) throw StopRequested("a stop signal while waiting for " + path_);
      if (!told)
        std::fprintf(stderr, "out-dir lock: %s is held by %s; waiting up to %g s\n", path_.c_str(),
                     held_by.c_str(), wait_seconds);
      told = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const std::string previous = read_record(fd_.get(), path_);
    if (!previous.empty())
      std::fprintf(stderr,
                   "out-dir lock: taking over %s from %s, which ended without releasing it\n",
                   path_.c_str(), previous.c_str());
    write_record(fd_.get(), path_, holder + " since " + utc_now());
  } catch (...) {
    fd_.reset();
    remove_created_dirs();
    throw;
  }
}

DirLock::~DirLock() {
  if (fd_.get() >= 0) ::unlink(path_.c_str());  // still held: a waiter checks the name again
  fd_.reset();
  remove_created_dirs();
}

void DirLock::remove_created_dirs() {
  if (created_from_.empty()) return;
  std::error_code ec;
  for (fs::path p = normal_dir(dir_); !p.empty(); p = p.parent_path())
    if (!fs::remove(p, ec) || p == created_from_) break;  // not empty: it and its parents stay
}

}  // namespace mpitrain
