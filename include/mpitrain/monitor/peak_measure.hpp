// The CPU peak measured so that contention shows: a peak must be the machine's, not the
// moment's. Several sgemm trials; the best one counts, and the measurement is contended when
// that trial's threads did not run the whole time (process CPU time against wall time: others
// took their CPUs, or a hypervisor stole them) or the host had more runnable threads than CPUs
// between trials (Linux's /proc/stat procs_running). A contended figure is never cached
// (monitor/peak_cache.hpp) and the start-up line calls it suspect.
#pragma once

#include <string>
#include <vector>

#include "mpitrain/backend/sgemm_rate.hpp"

namespace mpitrain {

// The least CPU time / (wall time x threads with a CPU each) of a trial that ran alone: ~1 less
// interrupts, as sgemm threads spin rather than sleep while they wait for each other, so a short
// share means they waited for a CPU. Not measured idle on the 2-core AMD EPYC Zen 5 development
// host: at load 15-20 its 1-thread 1024^3 trials ran 0.17-0.25 of the time (14-24 GFLOP/s).
inline constexpr double kMinBusyShare = 0.9;

struct PeakMeasurement {
  double gflops = 0.0;     // the best trial's
  double busy = 0.0;       // that trial's CPU time / (wall time x threads with a CPU each)
  std::string contention;  // "" when it ran alone; else what showed otherwise, for the user
};

// Pure: the verdict on `trials` run by `threads` threads on `cpus` allowed CPUs. runnable: the
// fewest runnable threads the host had between trials (ours included), -1 when unknown;
// host_cpus: the host's CPUs online.
PeakMeasurement judge_trials(const std::vector<SgemmTrial>& trials, int threads, int cpus,
                             int runnable, int host_cpus);

// The runnable threads on the host now (procs_running in proc_stat); -1 when it cannot be read.
int runnable_threads(const std::string& proc_stat = "/proc/stat");

// Five 1024^3 trials of the backend's sgemm under the current thread count (`threads`) and this
// process's `cpus` allowed CPUs, judged by judge_trials.
PeakMeasurement measure_cpu_peak(int threads, int cpus);
// The same with the backend's bf16 products (bf16_gemm_rate.hpp): the bf16 peak; a rate of 0
// where the CPU has no bf16 instructions.
PeakMeasurement measure_cpu_bf16_peak(int threads, int cpus);

}  // namespace mpitrain
