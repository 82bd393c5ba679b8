// The durable file-system steps of io/durable.hpp.
#include "mpitrain/io/durable.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// "1.8 MB" for messages about space.
std::string megabytes(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MB", bytes / 1e6);
  return text;
}

class Fd {  // an open file descriptor, closed on destruction (close_checked: its error seen)
 public:
  Fd(const std::string& path, int flags, mode_t mode = 0)
      : path_(path), fd_(::open(path.c_str(), flags, mode)) {
    if (fd_ < 0) throw_file_error(errno, "opening", path);
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  // NFS reports a write that the server refused (no space, over quota) as late as close.
  void close_checked() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && errno != EINTR) throw_file_error(errno, "closing", path_);
  }

 private:
  std::string path_;
  int fd_;
};

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

std::string file_error_text(int err, const std::string& doing, const std::string& path) {
  return std::string(std::strerror(err)) + " " + doing + " " + path;
}

void throw_file_error(int err, const std::string& doing, const std::string& path) {
  throw Error(file_error_text(err, doing, path));
}

void fsync_path(const std::string& path) {
  const Fd fd(path, O_RDONLY | O_CLOEXEC);
  if (::fsync(fd.get()) != 0) throw_file_error(errno, "syncing", path);
}

void write_file_synced(const std::string& path, const std::string& content) {
  Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno != EINTR) throw_file_error(errno, "writing", path);
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) throw_file_error(errno, "writing", path);
  fd.close_checked();
}

void rename_durably(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw_file_error(errno, "renaming " + from + " to", to);
  fsync_path(parent_of(to));
}

void reserve_space(const std::string& path, uint64_t bytes) {
  const Fd fd(path, O_WRONLY | O_CLOEXEC);
  int rc;
  do {
    rc = ::fallocate(fd.get(), FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(bytes));
  } while (rc != 0 && errno == EINTR);
  const int err = rc == 0 ? 0 : errno;
  if (err == 0) return;
  struct statvfs fs_info {};
  const bool known = ::statvfs(parent_of(path).c_str(), &fs_info) == 0;
  const double free_bytes = known ? static_cast<double>(fs_info.f_bavail) * fs_info.f_frsize : 0;
  const std::string figures = " (" + megabytes(static_cast<double>(bytes)) + " needed, " +
                              (known ? megabytes(free_bytes) : "?") + " free)";
  // A file system that cannot reserve: its free space must hold the file instead.
  if (err == EOPNOTSUPP || err == ENOSYS) {
    if (!known || free_bytes >= static_cast<double>(bytes)) return;
    throw_file_error(ENOSPC, "writing", path + figures);
  }
  throw_file_error(err, "writing", path + figures);
}

void release_reserved_space(const std::string& path) {
  const Fd fd(path, O_WRONLY | O_CLOEXEC);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw_file_error(errno, "reading the size of", path);
  if (::ftruncate(fd.get(), st.st_size) != 0) throw_file_error(errno, "truncating", path);
}

}  // namespace mpitrain
