#include "mpitrain/io/text_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

std::ifstream open_text_file(const std::string& path, const std::string& what) {
  const std::string prefix = "cannot read " + what + " '" + path + "': ";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw UsageError(prefix + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw UsageError(prefix + "it is a directory");
  std::ifstream in(path);
  if (!in) throw UsageError(prefix + std::strerror(errno));
  return in;
}

}  // namespace mpitrain
