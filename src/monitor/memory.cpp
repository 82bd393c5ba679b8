#include "mpitrain/monitor/memory.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
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

constexpr double kNoLimit = std::numeric_limits<double>::infinity();

// A cgroup file's number; kNoLimit when the file is absent (no such controller here) or says
// "max" (cgroup v2's no limit).
double cgroup_number(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return kNoLimit;
  return std::stod(text);
}

// limit - usage of one cgroup directory's memory controller (v2 names, else v1's).
double cgroup_room(const std::string& dir) {
  const double v2 = cgroup_number(dir + "/memory.max");
  if (v2 < kNoLimit) return v2 - cgroup_number(dir + "/memory.current");
  const double v1 = cgroup_number(dir + "/memory.limit_in_bytes");
  // v1 says "no limit" with a page-rounded LONG_MAX.
  if (v1 < 1e18) return v1 - cgroup_number(dir + "/memory.usage_in_bytes");
  return kNoLimit;
}

// The room left in this process's memory cgroup: its own directory as /proc/self/cgroup names it
// ("0::/path" for v2, "N:memory:/path" for v1), and the mount's root, which is the process's own
// cgroup inside a container's cgroup namespace.
double cgroup_room_of_self() {
  double room = std::min(cgroup_room("/sys/fs/cgroup"), cgroup_room("/sys/fs/cgroup/memory"));
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("0::", 0) == 0)
      room = std::min(room, cgroup_room("/sys/fs/cgroup" + line.substr(3)));
    const size_t memory = line.find(":memory:");
    if (memory != std::string::npos)
      room = std::min(room, cgroup_room("/sys/fs/cgroup/memory" + line.substr(memory + 8)));
  }
  return std::max(0.0, room);
}

}  // namespace

double peak_rss_mib() { return proc_kib("/proc/self/status", "VmHWM:") / 1024.0; }

double available_memory_bytes() {
  return std::min(proc_kib("/proc/meminfo", "MemAvailable:") * 1024.0, cgroup_room_of_self());
}

}  // namespace mpitrain
