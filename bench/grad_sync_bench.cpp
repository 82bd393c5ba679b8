// grad-sync-bench: the trainer's data-parallel gradient sync (GradBuckets over MpiCommunicator)
// against one plain MPI_Allreduce of the same bytes, in the same run.
//
//   mpirun -np N grad-sync-bench [--sizes 4M,16M,64M,256M] [--bucket-mb 25] [--iters 7]
//     [--warmup 1] [--goal 0.9]
//
// For every gradient-buffer size S (bytes of floats) over MPI_COMM_WORLD, each iteration times
//   trainer: GradBuckets(world, grads, S/4, bucket-mb MiB): ready_from(0) then finish()
//            (every bucket's MPI_Iallreduce is started at once, then all are waited), and
//   MPI:     MPI_Allreduce(MPI_IN_PLACE, grads, S/4, MPI_FLOAT, MPI_SUM, world),
// and, to tell the non-blocking collective from the bucketing, a diagnostic third column:
//   Iallreduce: one MPI_Iallreduce of the whole buffer then MPI_Wait (what GradBuckets does with
//            one bucket),
// interleaved (the order rotates between iterations). Each time is the slowest rank's, from a
// barrier; the reported time is the median over iterations. nccl-tests' definitions:
// algbw = S / t, busbw = algbw x 2(n-1)/n (GB/s, 1e9 bytes). ratio = trainer busbw / MPI busbw.
//
// Before every operation rank r fills element i with (r + 1) + (i mod 8), so every correct sum is
// the exact float n(n+1)/2 + n (i mod 8); #wrong counts differing elements over all ranks, all
// iterations (warm-up included) and all three operations. Exit code: 0 all correct, 1 a wrong
// value or a failure, 2 bad options. The goal line (trainer busbw >= goal x MPI busbw) is
// informational.
//
// With --modes none,zero,bf16,fp16,int8,topk (any of them) it prints instead, per size and mode,
// the GradBuckets sync in that mode (zero: finish() then gather_params() of the same buffer, the
// full ZeRO round trip; int8 and topk with error feedback, --topk-ratio): bytes handed to MPI per
// step and rank (Communicator::bytes_sent, measured) and their ratio to fp32, the median time of
// the slowest rank and busbw = (bytes of fp32 gradients / t) x 2(n-1)/n: the all-reduce
// bandwidth that would sync the same gradients as fast. none, zero, bf16 and fp16 must be exact
// on this data (small integers); #wrong counts their wrong elements. int8 and topk are not exact:
// "max err" is the largest |result - sum| over max|sum| in the first iteration (no residual yet;
// later ones deliver what earlier ones held back); topk's 1 means some sums were held back whole.
#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/parallel/compression.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/program.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

constexpr int kExitWrong = 1;  // kExitFailure (1) and kExitUsage (2) are mpitrain's

struct Options {
  std::vector<size_t> sizes;
  double bucket_mb = 25;
  int iters = 7, warmup = 1;
  double goal = 0.9;
  std::vector<std::string> modes;  // --modes: the per-mode table instead
  double topk_ratio = 0.01;
};

// "4M", "256M", "1G", "4096" (powers of 1024).
size_t parse_bytes(const std::string& text) {
  if (text.empty() || text[0] < '0' || text[0] > '9')  // stoull would wrap a "-4"
    throw std::invalid_argument("size '" + text + "' is not a positive multiple of 4 bytes");
  size_t pos = 0;
  const unsigned long long value = std::stoull(text, &pos);
  const std::string suffix = text.substr(pos);
  unsigned long long scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1ull << 10;
  else if (suffix == "M" || suffix == "m")
    scale = 1ull << 20;
  else if (suffix == "G" || suffix == "g")
    scale = 1ull << 30;
  else if (!suffix.empty())
    throw std::invalid_argument("bad size '" + text + "'");
  const size_t bytes = static_cast<size_t>(value * scale);
  if (bytes < sizeof(float) || bytes % sizeof(float) != 0)
    throw std::invalid_argument("size '" + text + "' is not a positive multiple of 4 bytes");
  return bytes;
}

// Returns false after printing help or an error (on rank 0); code says which.
bool parse(int argc, char** argv, bool root, Options& o, int& code) {
  std::string sizes = "4M,16M,64M,256M", modes;
  po::options_description desc(
      "grad-sync-bench — GradBuckets vs MPI_Allreduce bus bandwidth\n\nUsage: mpirun -np N "
      "grad-sync-bench [options]\n\nOptions");
  desc.add_options()("help,h", "print this help and exit")(
      "sizes", po::value(&sizes)->default_value(sizes), "gradient buffer sizes, comma-separated")(
      "bucket-mb", po::value(&o.bucket_mb)->default_value(o.bucket_mb), "GradBuckets bucket MiB")(
      "iters", po::value(&o.iters)->default_value(o.iters), "timed iterations per size")(
      "warmup", po::value(&o.warmup)->default_value(o.warmup), "untimed iterations first")(
      "goal", po::value(&o.goal)->default_value(o.goal), "goal: trainer busbw / MPI busbw")(
      "modes", po::value(&modes),
      "per-mode table of none,zero,bf16,fp16,int8,topk (any, comma-separated) instead")(
      "topk-ratio", po::value(&o.topk_ratio)->default_value(o.topk_ratio), "topk: kept fraction");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      if (root) std::cout << desc << "\n";
      code = 0;
      return false;
    }
    std::stringstream in(sizes);
    for (std::string item; std::getline(in, item, ',');)
      if (!item.empty()) o.sizes.push_back(parse_bytes(item));
    if (o.sizes.empty()) throw std::invalid_argument("--sizes is empty");
    if (o.iters < 1 || o.warmup < 0) throw std::invalid_argument("--iters >= 1, --warmup >= 0");
    if (o.bucket_mb <= 0) throw std::invalid_argument("--bucket-mb must be > 0");
    std::stringstream list(modes);
    for (std::string item; std::getline(list, item, ',');) {
      if (item.empty()) continue;
      if (item != "zero") parse_grad_compress(item);  // UsageError names the choices
      o.modes.push_back(item);
    }
    if (o.topk_ratio <= 0 || o.topk_ratio > 1)
      throw std::invalid_argument("--topk-ratio must lie in (0, 1]");
    // Each is printed by one table only: given to the other, refused.
    if (!vm["goal"].defaulted() && !o.modes.empty())
      throw std::invalid_argument(
          "--goal is the GradBuckets-vs-MPI table's, and --modes prints "
          "the per-mode table: leave one out");
    if (!vm["topk-ratio"].defaulted() &&
        std::find(o.modes.begin(), o.modes.end(), "topk") == o.modes.end())
      throw std::invalid_argument("--topk-ratio sets the topk mode, and --modes has no topk");
  } catch (const std::exception& e) {
    if (root) std::fprintf(stderr, "grad-sync-bench: %s\n", e.what());
    code = kExitUsage;
    return false;
  }
  return true;
}

void fill(std::vector<float>& buf, int rank) {
  const float base = static_cast<float>(rank + 1);
  float* p = buf.data();
  const size_t n = buf.size();
  for (size_t i = 0; i < n; ++i) p[i] = base + static_cast<float>(i & 7);
}

int64_t count_wrong(const std::vector<float>& buf, int size) {
  const float base = static_cast<float>(size * (size + 1) / 2);
  const float per = static_cast<float>(size);
  int64_t wrong = 0;
  const float* p = buf.data();
  const size_t n = buf.size();
  for (size_t i = 0; i < n; ++i) wrong += p[i] != base + per * static_cast<float>(i & 7);
  return wrong;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

std::string format_bytes(size_t bytes) {
  char text[32];
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0)
    std::snprintf(text, sizeof text, "%zu MiB", bytes >> 20);
  else
    std::snprintf(text, sizeof text, "%zu B", bytes);
  return text;
}

// The --modes table (see the top of the file).
int run_modes(MpiCommunicator& comm, const Options& o) {
  const int rank = comm.rank(), size = comm.size();
  const bool root = rank == 0;
  const double factor = 2.0 * (size - 1) / size;
  if (root) {
    std::printf(
        "# grad-sync-bench: %d ranks, GradBuckets %.4g MiB buckets per mode, topk-ratio %g, %d "
        "iterations + %d warm-up, median of the slowest rank\n",
        size, o.bucket_mb, o.topk_ratio, o.iters, o.warmup);
    std::printf(
        "# busbw = (fp32 gradient bytes / time) x %.3f (GB/s, 1e9); sent = bytes this rank "
        "handed to MPI per step\n",
        factor);
    std::printf("# %10s %6s %8s | %12s %8s | %12s %9s | %7s %9s\n", "bytes", "mode", "buckets",
                "sent B/step", "/fp32", "time us", "busbw", "#wrong", "max err");
  }
  int64_t total_wrong = 0;
  for (size_t bytes : o.sizes) {
    std::vector<float> grads(bytes / sizeof(float));
    const float expect_max = static_cast<float>(size * (size + 1) / 2 + size * 7);
    uint64_t fp32_sent = 0;
    for (const std::string& mode : o.modes) {
      GradSyncOptions options;
      options.zero = mode == "zero";
      if (!options.zero) options.compress = parse_grad_compress(mode);
      options.topk_ratio = o.topk_ratio;
      GradBuckets buckets(comm, grads.data(), grads.size(),
                          static_cast<size_t>(o.bucket_mb * (1 << 20)), options);
      const bool exact =
          options.compress != GradCompress::Int8 && options.compress != GradCompress::TopK;
      std::vector<double> times;
      int64_t wrong = 0;
      uint64_t sent = 0;
      double err = 0;
      for (int it = 0; it < o.warmup + o.iters; ++it) {
        fill(grads, rank);
        comm.reset_bytes_sent();
        MPI_CHECK(MPI_Barrier(comm.mpi()));
        const auto start = std::chrono::steady_clock::now();
        buckets.ready_from(0);
        buckets.finish();
        buckets.gather_params(grads.data());  // zero: the owned sums to every rank
        double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        sent = comm.bytes_sent();
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, comm.mpi()));
        if (it >= o.warmup) times.push_back(seconds);
        if (exact) {
          wrong += count_wrong(grads, size);
        } else if (it == 0) {
          for (size_t i = 0; i < grads.size(); ++i) {
            const float want = static_cast<float>(size * (size + 1) / 2) +
                               static_cast<float>(size) * static_cast<float>(i & 7);
            err = std::max(err, static_cast<double>(std::fabs(grads[i] - want)));
          }
          err /= expect_max;
          MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &err, 1, MPI_DOUBLE, MPI_MAX, comm.mpi()));
        }
      }
      MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, comm.mpi()));
      total_wrong += wrong;
      if (mode == "none") fp32_sent = sent;
      const double t = median(times);
      if (root) {
        char ratio[16] = "-", wrong_text[24] = "-", err_text[24] = "-";
        if (fp32_sent > 0)
          std::snprintf(ratio, sizeof ratio, "%.4f",
                        static_cast<double>(sent) / static_cast<double>(fp32_sent));
        if (exact)
          std::snprintf(wrong_text, sizeof wrong_text, "%lld", static_cast<long long>(wrong));
        else
          std::snprintf(err_text, sizeof err_text, "%.2e", err);
        std::printf("  %10zu %6s %8zu | %12llu %8s | %12.0f %9.3f | %7s %9s\n", bytes, mode.c_str(),
                    buckets.buckets(), static_cast<unsigned long long>(sent), ratio, t * 1e6,
                    static_cast<double>(bytes) / t * factor / 1e9, wrong_text, err_text);
        std::fflush(stdout);
      }
    }
  }
  if (root) {
    std::printf("# wrong elements in all (exact modes): %lld%s\n",
                static_cast<long long>(total_wrong), total_wrong ? "  <-- ERROR" : "");
    std::fflush(stdout);
  }
  return total_wrong ? kExitWrong : 0;
}

int run(int argc, char** argv) {
  MPI_Comm world = MPI_COMM_WORLD;
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(world, &rank));
  MPI_CHECK(MPI_Comm_size(world, &size));
  const bool root = rank == 0;
  Options o;
  int code = 0;
  if (!parse(argc, argv, root, o, code)) return code;

  MpiCommunicator comm(world);
  if (!o.modes.empty()) return run_modes(comm, o);
  const double factor = 2.0 * (size - 1) / size;
  if (root) {
    std::printf(
        "# grad-sync-bench: %d ranks, GradBuckets %.4g MiB buckets vs MPI_Allreduce "
        "(in place, float sum), %d iterations + %d warm-up, median of the slowest rank\n",
        size, o.bucket_mb, o.iters, o.warmup);
    std::printf("# busbw = (bytes / time) x 2(n-1)/n = x %.3f (GB/s, 1e9)\n", factor);
    std::printf("# %10s %8s | %12s %9s | %12s %9s | %6s %7s || %14s %9s\n", "bytes", "buckets",
                "trainer us", "busbw", "MPI us", "busbw", "ratio", "#wrong", "Iallreduce us",
                "busbw");
  }
  if (size == 1 && root)
    std::printf("# one rank: GradBuckets does nothing and busbw is 0 by definition\n");

  struct Row {
    size_t bytes;
    double ratio;
  };
  std::vector<Row> rows;
  int64_t total_wrong = 0;
  for (size_t bytes : o.sizes) {
    std::vector<float> grads(bytes / sizeof(float));
    GradBuckets buckets(comm, grads.data(), grads.size(),
                        static_cast<size_t>(o.bucket_mb * (1 << 20)));
    const int count = static_cast<int>(grads.size());
    enum { kTrainer, kMpi, kIallreduce, kKinds };
    std::vector<double> times[kKinds];
    int64_t wrong = 0;
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      for (int k = 0; k < kKinds; ++k) {
        const int kind = (k + it) % kKinds;  // rotate which goes first
        fill(grads, rank);
        MPI_CHECK(MPI_Barrier(world));
        const auto start = std::chrono::steady_clock::now();
        if (kind == kTrainer) {
          buckets.ready_from(0);
          buckets.finish();
        } else if (kind == kMpi) {
          MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, grads.data(), count, MPI_FLOAT, MPI_SUM, world));
        } else {
          MPI_Request request = MPI_REQUEST_NULL;
          MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, grads.data(), count, MPI_FLOAT, MPI_SUM, world,
                                   &request));
          MPI_CHECK(MPI_Wait(&request, MPI_STATUS_IGNORE));
        }
        double seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, world));
        wrong += count_wrong(grads, size);
        if (it >= o.warmup) times[kind].push_back(seconds);
      }
    }
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, world));
    total_wrong += wrong;
    const double tt = median(times[kTrainer]), tm = median(times[kMpi]);
    const double ti = median(times[kIallreduce]);
    const auto busbw = [&](double t) { return static_cast<double>(bytes) / t * factor / 1e9; };
    const double bw_t = busbw(tt), bw_m = busbw(tm);
    const double ratio = bw_m > 0 ? bw_t / bw_m : 0.0;
    rows.push_back({bytes, ratio});
    if (root) {
      std::printf("  %10zu %8zu | %12.0f %9.3f | %12.0f %9.3f | %6.3f %7lld || %14.0f %9.3f\n",
                  bytes, buckets.buckets(), tt * 1e6, bw_t, tm * 1e6, bw_m, ratio,
                  static_cast<long long>(wrong), ti * 1e6, busbw(ti));
      std::fflush(stdout);
    }
  }
  if (root) {
    std::printf("# goal: trainer sync >= %.0f%% of MPI_Allreduce busbw\n", 100 * o.goal);
    for (const Row& r : rows)
      std::printf("#   %-8s ratio %.3f  %s\n", format_bytes(r.bytes).c_str(), r.ratio,
                  size > 1 && r.ratio >= o.goal ? "PASS" : "MISS");
    std::printf("# wrong elements in all: %lld%s\n", static_cast<long long>(total_wrong),
                total_wrong ? "  <-- ERROR" : "");
    std::fflush(stdout);
  }
  return total_wrong ? kExitWrong : 0;
}

}  // namespace

int main(int argc, char** argv) {
  return mpitrain::mpi_program("grad-sync-bench", argc, argv, run);
}
