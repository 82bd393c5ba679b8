#include "mpitrain/monitor/peak_measure.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>

#include "mpitrain/backend/bf16_gemm_rate.hpp"

namespace mpitrain {

PeakMeasurement judge_trials(const std::vector<SgemmTrial>& trials, int threads, int cpus,
                             int runnable, int host_cpus) {
  PeakMeasurement m;
  if (trials.empty()) return m;
  const SgemmTrial& best = *std::max_element(
      trials.begin(), trials.end(), [](const auto& a, const auto& b) { return a.gflops < b.gflops; });
  const int running = std::max(1, std::min(threads, cpus));  // threads that can run at once
  m.gflops = best.gflops;
  m.busy = best.wall_s > 0 ? best.cpu_s / (best.wall_s * running) : 0.0;
  std::vector<std::string> seen;
  if (m.busy < kMinBusyShare)
    seen.push_back("in the best of " + std::to_string(trials.size()) + " sgemm trials its " +
                   (running == 1 ? "thread" : std::to_string(running) + " threads") + " ran " +
                   std::to_string(static_cast<int>(std::lround(100.0 * m.busy))) +
                   "% of the time (others took the CPU)");
  if (runnable >= 0 && host_cpus > 0 && runnable > host_cpus)
    seen.push_back("the host had " + std::to_string(runnable) + " runnable threads on " +
                   std::to_string(host_cpus) + " CPUs");
  for (size_t i = 0; i < seen.size(); ++i) m.contention += (i ? "; " : "") + seen[i];
  return m;
}

int runnable_threads(const std::string& proc_stat) {
  std::ifstream in(proc_stat);
  for (std::string word; in >> word;) {
    if (word != "procs_running") continue;
    int n = -1;
    return in >> n ? n : -1;
  }
  return -1;
}

namespace {
// judge_trials over trial(sample): the fewest runnable threads sampled between its trials.
PeakMeasurement measure_trials(
    int threads, int cpus,
    const std::function<std::vector<SgemmTrial>(const std::function<void()>&)>& trial) {
  int fewest = -1;  // runnable threads, the least of the samples: a passing burst is not load
  const auto sample = [&] {
    const int now = runnable_threads();
    if (now >= 0 && (fewest < 0 || now < fewest)) fewest = now;
  };
  const std::vector<SgemmTrial> trials = trial(sample);  // before `fewest` is read below
  return judge_trials(trials, threads, cpus, fewest,
                      static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}
}  // namespace

PeakMeasurement measure_cpu_peak(int threads, int cpus) {
  return measure_trials(threads, cpus, [](const std::function<void()>& sample) {
    return time_sgemm_trials(1024, 5, SgemmLibrary::Backend, sample);
  });
}

PeakMeasurement measure_cpu_bf16_peak(int threads, int cpus) {
  return measure_trials(threads, cpus, [](const std::function<void()>& sample) {
    return time_bf16_gemm_trials(1024, 5, sample);
  });
}

}  // namespace mpitrain
