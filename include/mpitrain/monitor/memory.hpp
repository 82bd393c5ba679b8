// Host memory of this process, as the kernel counts it.
#pragma once

namespace mpitrain {

// Peak resident set size of this process so far (VmHWM of /proc/self/status), in MiB.
double peak_rss_mib();

}  // namespace mpitrain
