#include "mpitrain/runtime/error.hpp"

#include <cstring>

namespace mpitrain {

std::string where(const char* file, int line, const std::string& what) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line) + ": " + what;
}

}  // namespace mpitrain
