// The durable file-system steps of io/durable.hpp.
#include "mpitrain/io/durable.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  MPITRAIN_THROW(what + " '" + path + "': " + std::strerror(errno));
}

class Fd {  // an open file descriptor, closed on destruction
 public:
  Fd(const std::string& path, int flags, mode_t mode = 0) : fd_(::open(path.c_str(), flags, mode)) {
    if (fd_ < 0) fail("cannot open", path);
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

void fsync_path(const std::string& path) {
  const Fd fd(path, O_RDONLY | O_CLOEXEC);
  if (::fsync(fd.get()) != 0) fail("cannot fsync", path);
}

void write_file_synced(const std::string& path, const std::string& content) {
  const Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = ::write(fd.get(), content.data() + done, content.size() - done);
    if (n < 0 && errno != EINTR) fail("cannot write", path);
    if (n > 0) done += static_cast<size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail("cannot fsync", path);
}

void rename_durably(const std::string& from, const std::string& to) {
  fs::rename(from, to);
  fsync_path(parent_of(to));
}

}  // namespace mpitrain
