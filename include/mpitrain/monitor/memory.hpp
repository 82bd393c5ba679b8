// Host memory of this process, as the kernel counts it.
#pragma once

namespace mpitrain {

// Peak resident set size of this process so far (VmHWM of /proc/self/status), in MiB.
double peak_rss_mib();
// Memory the kernel could give to new allocations without swapping (MemAvailable of
// /proc/meminfo), or the room left under this process's memory cgroup limit (v1 or v2) where
// that is less, in bytes.
double available_memory_bytes();

}  // namespace mpitrain
