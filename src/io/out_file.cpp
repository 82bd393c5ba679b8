#include "mpitrain/io/out_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

OutFile::OutFile(std::string path)
    : path_(std::move(path)),
      fd_(::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) {
  if (fd_ < 0) throw UsageError(path_ + ": cannot create: " + std::strerror(errno));
}

OutFile::~OutFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void OutFile::write(const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) MPITRAIN_THROW(path_ + ": write failed: " + std::strerror(n < 0 ? errno : EIO));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void OutFile::commit(const std::string& final_path) {
  if (::fsync(fd_) != 0) MPITRAIN_THROW(path_ + ": fsync failed: " + std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) MPITRAIN_THROW(path_ + ": close failed: " + std::strerror(errno));
  if (std::rename(path_.c_str(), final_path.c_str()) != 0)
    MPITRAIN_THROW("rename " + path_ + " -> " + final_path + " failed: " + std::strerror(errno));
  committed_ = true;
}

}  // namespace mpitrain
