// The CPU peak that MFU is measured against, measured once per host and kept, so that MFU is
// comparable between runs (a fresh sgemm measurement at every start varies by 2x or more).
//
// The cache is a small file of JSON lines, one entry per host, CPU model, thread count,
// allowed-CPU count and sgemm library:
//   {"host":"n1","cpu":"AMD EPYC 7763 64-Core Processor","threads":4,"cpus":4,
//    "gemm":"OpenBLAS sgemm","gflops":182.4,"date":"2026-12-01T10:00Z"}
// An entry is reused only when all five match: a rank bound to fewer CPUs, running another
// number of threads, or with another sgemm library (an AVX-512 CPU's entries of versions that
// measured OpenBLAS, before the backend ran oneDNN's there) measures its own.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

// The sgemm of the entries written before the "gemm" field: the only one the backend ran then.
inline constexpr const char* kOldCpuGemm = "OpenBLAS sgemm";

struct PeakKey {
  std::string host, cpu_model;
  int threads = 0;  // the OpenBLAS threads it was measured with
  int cpus = 0;     // the CPUs the rank was allowed (sched_getaffinity)
  // The sgemm measured (cpu_sgemm_library()); an entry written before the field: kOldCpuGemm.
  std::string gemm;
  bool operator==(const PeakKey&) const = default;
};

struct PeakEntry {
  PeakKey key;
  double gflops = 0.0;
  std::string date;  // UTC, "2026-12-01T10:00Z"
};

struct Peak {
  double gflops = 0.0;  // per rank
  // For the start-up line: "given by --peak-gflops", "cached 2026-12-01T10:00Z in <file>",
  // "measured now (cached in <file>)", "measured now (not cached: <why>)".
  std::string source;
  std::string note;  // a cache file ignored as unreadable or corrupt, and why; else ""
};

// The cache file: override_path (MPITRAIN_PEAK_CACHE), else <xdg_cache_home>/mpitrain/
// peak-gflops.jsonl, else <home>/.cache/mpitrain/peak-gflops.jsonl; "" when none is set.
// Pure: the arguments are the variables' values (null or empty: unset).
std::string peak_cache_path(const char* override_path, const char* xdg_cache_home,
                            const char* home);

// The first "model name" in cpuinfo (Linux's /proc/cpuinfo); "unknown" where there is none.
std::string cpu_model_name(const std::string& cpuinfo = "/proc/cpuinfo");

// The file's entries; none for a missing file. Error (naming the file and line) for a file that
// cannot be read or a line that is not an entry.
std::vector<PeakEntry> read_peak_cache(const std::string& path);
// Replaces the file at once (a temporary file beside it, renamed over it) and creates its
// directory: a reader sees the old file or the new one, never part of one. Error on failure.
void write_peak_cache(const std::string& path, const std::vector<PeakEntry>& entries);

// One process: key's entry in the cache at path, else measure()'s GFLOP/s (rounded to the 0.1
// the file keeps, so that this run and later ones use the same number) added to it. Writers
// take a lock beside the file (<path>.lock), then merge into what is there now, so that ranks of
// several hosts sharing one home directory keep each other's entries. A bad file is ignored
// (Peak::note), one that cannot be written leaves the number uncached: neither throws.
Peak cached_or_measured_peak(const std::string& path, const PeakKey& key,
                             const std::function<double()>& measure);

// Collective over node (the ranks of one host): this rank's peak. given > 0 (--peak-gflops)
// wins. Else the first rank of each (threads, allowed CPUs) pair on the host reads the cache
// (peak_cache_path of the environment) or measures under its own affinity, one pair after the
// other while the rest wait without spinning, and passes the result to the ranks of its pair.
// `threads`: what OpenBLAS runs with now; measure: the sgemm rate under that setting.
Peak resolve_cpu_peak(double given, const MpiComm& node, int threads,
                      const std::function<double()>& measure);

}  // namespace mpitrain
