#include "mpitrain/monitor/memory.hpp"

#include <fstream>
#include <string>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  if (!status) MPITRAIN_THROW("cannot read /proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0)
      return std::stod(line.substr(6)) / 1024.0;  // "VmHWM:  1234 kB"
  MPITRAIN_THROW("/proc/self/status has no VmHWM line");
}

}  // namespace mpitrain
