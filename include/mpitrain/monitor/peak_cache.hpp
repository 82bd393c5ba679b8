// The CPU peak that MFU is measured against: the machine's, not the moment's. Measured at every
// start (monitor/peak_measure.hpp: several trials, contention detected) and kept per host, so
// that MFU is comparable between runs: a cached figure is replaced only by a higher one measured
// without contention, and a contended measurement is never cached.
//
// The cache is a small file of JSON lines, one entry per host, CPU model, thread count,
// allowed-CPU count, sgemm library with its kernels and kind of arithmetic:
//   {"host":"n1","cpu":"AMD EPYC 7763 64-Core Processor","threads":4,"cpus":4,
//    "gemm":"OpenBLAS sgemm SkylakeX","kind":"fp32","gflops":182.4,"busy":0.99,"date":"2026-12-01T10:00Z"}
// An entry is reused only when all six match: a rank bound to fewer CPUs, running another
// number of threads, or with another sgemm library (an AVX-512 CPU's entries of versions that
// measured OpenBLAS, before the backend ran oneDNN's there; entries without OpenBLAS's kernel name,
// which may hold the rate of a fallback kernel: backend/blas_kernel.hpp) measures its own. "busy" is the
// measurement's CPU-time share (peak_measure.hpp); entries of versions that did not check for
// contention have none (read as 0: unchecked).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mpitrain/monitor/peak_measure.hpp"
#include "mpitrain/runtime/affinity.hpp"
#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

// The sgemm of the entries written before the "gemm" field: the only one the backend ran then.
inline constexpr const char* kOldCpuGemm = "OpenBLAS sgemm";
// The kind of an entry written before the "kind" field: fp32 sgemm, the only one measured then.
inline constexpr const char* kFp32Peak = "fp32";
// The bf16 peak (bf16_gemm_rate.hpp): what a bf16 or fp16 run's MFU counts against where the CPU
// has bf16 instructions.
inline constexpr const char* kBf16Peak = "bf16";

struct PeakKey {
  std::string host, cpu_model;
  int threads = 0;  // the OpenBLAS threads it was measured with
  int cpus = 0;     // the CPUs the rank was allowed (sched_getaffinity)
  // The sgemm measured (cpu_sgemm_kernel()); an entry written before the field: kOldCpuGemm.
  std::string gemm;
  std::string kind = kFp32Peak;  // the arithmetic measured
  bool operator==(const PeakKey&) const = default;
};

struct PeakEntry {
  PeakKey key;
  double gflops = 0.0;
  std::string date;   // UTC, "2026-12-01T10:00Z"
  double busy = 0.0;  // the measurement's CPU-time share; 0: unchecked (an older version's)
};

struct Peak {
  // cached_or_measured_peak: the sgemm rate under the key's threads and CPUs. resolve_cpu_peak:
  // this rank's part of its host's peak (the rate per CPU x the CPUs the rank has: each CPU of
  // the host counted once, shared among the ranks allowed on it).
  double gflops = 0.0;
  double rate = 0.0;  // resolve_cpu_peak: the sgemm rate under this rank's threads and CPUs
  double cpus = 0.0;  // resolve_cpu_peak: this rank's share of its host's CPUs (cpu_share)
  // For the start-up line: "given by --peak-gflops", "cached 2026-12-01T10:00Z in <file>
  // (measured now: <rate>)", "measured now (cached in <file>)", "measured now (not cached:
  // <why>)".
  std::string source;
  std::string note;     // a cache file ignored as unreadable or corrupt, and why; else ""
  std::string suspect;  // "" when the figure is the machine's; else why it may be too low
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

// One process: measure() (its GFLOP/s rounded to the 0.1 the file keeps, so that this run and
// later ones use the same number) against key's entry in the cache at path: the higher of the
// two counts. A measurement above the entry (or with none) is stored when it saw no contention;
// a contended one is never stored, and is suspect when no checked entry stands above it.
// Writers take a lock beside the file (<path>.lock), then merge into what is there now, keeping
// the higher figure, so that ranks of several hosts sharing one home directory keep each
// other's entries. A bad file is ignored (Peak::note), one that cannot be written leaves the
// number uncached: neither throws.
Peak cached_or_measured_peak(const std::string& path, const PeakKey& key,
                             const std::function<PeakMeasurement()>& measure);

// Collective over node (the ranks of one host, cpus: their allowed CPUs): this rank's peak.
// given > 0 (--peak-gflops, one rank's) wins. Else the first rank of each (threads, allowed
// CPUs) pair on the host measures under its own affinity and weighs it against the cache
// (peak_cache_path of the environment), one pair after the other while the rest wait without
// spinning, and passes the result to the ranks of its pair; each rank then counts that rate per
// CPU (divided by the threads that ran at once) times its share of the host's CPUs.
// `threads`: what OpenBLAS runs with now; measure: the sgemm rate under that setting (kind
// kFp32Peak), or the bf16 products' (kBf16Peak: cached under that kind and kBf16GemmLibrary).
Peak resolve_cpu_peak(double given, const MpiComm& node, const NodeCpus& cpus, int threads,
                      const std::function<PeakMeasurement()>& measure,
                      const std::string& kind = kFp32Peak);

}  // namespace mpitrain
