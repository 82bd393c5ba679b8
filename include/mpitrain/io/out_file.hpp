// A file written through a POSIX fd, so that it can be fsync'ed before the rename that publishes
// it: write to a temporary path, commit() to the final one. Removed on destruction unless
// committed, so a failure midway leaves nothing behind.
#pragma once

#include <string>

namespace mpitrain {

class OutFile {
 public:
  explicit OutFile(std::string path);  // created or truncated; UsageError if it cannot be
  ~OutFile();
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;

  void write(const void* data, size_t bytes);  // Error on a failed write (strerror)
  // fsync, close and rename to final_path.
  void commit(const std::string& final_path);

 private:
  std::string path_;
  int fd_;
  bool committed_ = false;
};

}  // namespace mpitrain
