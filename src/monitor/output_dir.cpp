#include "mpitrain/monitor/output_dir.hpp"

#include <unistd.h>

#include <filesystem>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

void require_creatable_dir(const std::string& dir, const std::string& option) {
  if (dir.empty()) return;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  require(!ec, option + " " + dir + ": " + ec.message());
  while (!fs::exists(p, ec) && p.has_relative_path()) p = p.parent_path();
  require(fs::is_directory(p, ec),
          option + " " + dir + ": " + p.string() + " exists and is not a directory");
  require(access(p.c_str(), W_OK | X_OK) == 0,
          option + " " + dir + ": " + p.string() + " is not writable");
}

}  // namespace mpitrain
