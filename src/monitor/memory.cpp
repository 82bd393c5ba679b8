#include "mpitrain/monitor/memory.hpp"

#include <fstream>
#include <string>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// The value in kB of the line "<key>  1234 kB" of a /proc file.
double proc_kib(const char* path, const std::string& key) {
  std::ifstream in(path);
  if (!in) MPITRAIN_THROW(std::string("cannot read ") + path);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size()));
  MPITRAIN_THROW(std::string(path) + " has no " + key + " line");
}

}  // namespace

double peak_rss_mib() { return proc_kib("/proc/self/status", "VmHWM:") / 1024.0; }

double available_memory_bytes() { return proc_kib("/proc/meminfo", "MemAvailable:") * 1024.0; }

}  // namespace mpitrain
