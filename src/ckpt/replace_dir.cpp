// The checkpoint directory steps of the commit: replacing a committed directory, and finding one
// that a replace cut short left as <name>.old.
#include <filesystem>

#include "ckpt_io.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

void replace_dir(const std::string& tmp, const std::string& final) {
  const std::string old = final + ".old";
  if (fs::exists(final)) {
    fs::remove_all(old);
    fs::rename(final, old);  // from here until the next rename, old is the one to load
  }
  rename_durably(tmp, final);
  fs::remove_all(old);  // also a stale one from an earlier replace cut short
}

std::string resolve_dir(const std::string& path) {
  if (fs::is_directory(path)) return path;
  if (fs::is_directory(path + ".old")) return path + ".old";
  return "";
}

}  // namespace mpitrain
