// The MFU peak cache: where it lives, entries written and read back, which entries are reused,
// a bad or unwritable file, and the node-level resolution over MPI.
#include <cblas.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/monitor/peak_cache.hpp"
#include "mpitrain/runtime/affinity.hpp"
#include "mpitrain/runtime/error.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;

namespace {

class PeakCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mpitrain-peak-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

const PeakKey kKey{"n1", "Test CPU \"X\" @ 2.0GHz", 2, 2, "oneDNN sgemm"};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A measurement that counts its calls; contended where `contention` is set.
struct Measure {
  explicit Measure(double v, std::string c = "") : value(v), contention(std::move(c)) {}
  double value;
  std::string contention;
  int calls = 0;
  std::function<PeakMeasurement()> fn() {
    return [this] {
      ++calls;
      return PeakMeasurement{value, contention.empty() ? 0.99 : 0.4, contention};
    };
  }
};

// Busy-looping processes on this thread's CPUs, killed at the end of the scope.
class BusyLoops {
 public:
  explicit BusyLoops(int count) {
    for (int i = 0; i < count; ++i) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that dies
        for (volatile unsigned long spin = 0;;) spin = spin + 1;
      }
      if (pid < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
      if (pid > 0) pids_.push_back(pid);
    }
  }
  ~BusyLoops() {
    for (const pid_t pid : pids_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  BusyLoops(const BusyLoops&) = delete;
  BusyLoops& operator=(const BusyLoops&) = delete;

 private:
  std::vector<pid_t> pids_;
};

// Restricts this thread to `cpu` for the scope, then restores what it had.
class PinnedTo {
 public:
  explicit PinnedTo(int cpu) {
    if (sched_getaffinity(0, sizeof saved_, &saved_) != 0) ADD_FAILURE() << std::strerror(errno);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) ADD_FAILURE() << std::strerror(errno);
  }
  ~PinnedTo() {
    if (sched_setaffinity(0, sizeof saved_, &saved_) != 0) ADD_FAILURE() << std::strerror(errno);
  }
  PinnedTo(const PinnedTo&) = delete;
  PinnedTo& operator=(const PinnedTo&) = delete;

 private:
  cpu_set_t saved_;
};

}  // namespace

TEST(PeakCachePath, OverrideThenXdgThenHome) {
  EXPECT_EQ(peak_cache_path("/x/p.jsonl", "/xdg", "/home/u"), "/x/p.jsonl");
  EXPECT_EQ(peak_cache_path(nullptr, "/xdg", "/home/u"), "/xdg/mpitrain/peak-gflops.jsonl");
  EXPECT_EQ(peak_cache_path("", "", "/home/u"), "/home/u/.cache/mpitrain/peak-gflops.jsonl");
  EXPECT_EQ(peak_cache_path(nullptr, nullptr, nullptr), "");
}

TEST_F(PeakCache, CpuModelFromCpuinfo) {
  std::ofstream(file("cpuinfo")) << "processor\t: 0\nvendor_id\t: X\nmodel name\t: Fast CPU  \n"
                                 << "processor\t: 1\nmodel name\t: Other\n";
  EXPECT_EQ(cpu_model_name(file("cpuinfo")), "Fast CPU");
  std::ofstream(file("arm")) << "processor\t: 0\nCPU part\t: 0xd0c\n";
  EXPECT_EQ(cpu_model_name(file("arm")), "unknown");
  EXPECT_EQ(cpu_model_name(file("missing")), "unknown");
  EXPECT_NE(cpu_model_name(), "");  // this machine's
}

TEST_F(PeakCache, WriteAndReadBack) {
  const std::string path = file("sub/dir/peak.jsonl");  // the directory is created
  const std::vector<PeakEntry> entries = {{kKey, 123.4, "2026-12-01T10:00Z", 0.987},
                                          {{"n2", "Y", 1, 4, "oneDNN sgemm"}, 50.0, "2026-12-02T11:30Z"}};
  write_peak_cache(path, entries);
  const std::vector<PeakEntry> back = read_peak_cache(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].key, kKey);
  EXPECT_DOUBLE_EQ(back[0].gflops, 123.4);
  EXPECT_EQ(back[0].date, "2026-12-01T10:00Z");
  EXPECT_DOUBLE_EQ(back[0].busy, 0.99);  // kept to 2 digits
  EXPECT_EQ(back[1].key, (PeakKey{"n2", "Y", 1, 4, "oneDNN sgemm"}));
  EXPECT_DOUBLE_EQ(back[1].busy, 0.0);  // unchecked: written without "busy"
  EXPECT_EQ(slurp(path).substr(0, slurp(path).find('\n')),
            R"({"host":"n1","cpu":"Test CPU \"X\" @ 2.0GHz","threads":2,"cpus":2,)"
            R"("gemm":"oneDNN sgemm","kind":"fp32","gflops":123.4,"busy":0.99,)"
            R"("date":"2026-12-01T10:00Z"})");
  EXPECT_TRUE(read_peak_cache(file("missing")).empty());
}

TEST_F(PeakCache, AtomicReplaceLeavesNoTemporaryFile) {
  const std::string path = file("peak.jsonl");
  write_peak_cache(path, {{kKey, 1.0, "d"}});
  std::ifstream held(path);  // a reader that opened the old file keeps reading the old file
  write_peak_cache(path, {{kKey, 2.0, "d"}, {{"n2", "Y", 1, 1, "oneDNN sgemm"}, 3.0, "d"}});
  std::string old_line;
  std::getline(held, old_line);
  EXPECT_NE(old_line.find("\"gflops\":1.0"), std::string::npos) << old_line;
  EXPECT_EQ(read_peak_cache(path).size(), 2u);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename(), "peak.jsonl") << "left behind: " << e.path();
}

TEST_F(PeakCache, CachedOnceThenReusedWhileNotBeaten) {
  const std::string path = file("peak.jsonl");
  Measure m{101.26};
  const Peak first = cached_or_measured_peak(path, kKey, m.fn());
  EXPECT_EQ(m.calls, 1);
  EXPECT_DOUBLE_EQ(first.gflops, 101.3);  // rounded as stored
  EXPECT_EQ(first.source, "measured now (cached in " + path + ")");
  EXPECT_EQ(first.note, "");
  EXPECT_EQ(first.suspect, "");
  m.value = 80.0;  // a slower moment: the machine's figure stays
  const Peak second = cached_or_measured_peak(path, kKey, m.fn());
  EXPECT_EQ(m.calls, 2);  // measured at every start, to see whether the machine does better
  EXPECT_DOUBLE_EQ(second.gflops, first.gflops);
  EXPECT_TRUE(std::regex_match(
      second.source,
      std::regex("cached \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\dZ in .* \\(measured now: 80\\.0\\)")))
      << second.source;
  EXPECT_NE(second.source.find(path), std::string::npos);
  EXPECT_EQ(second.suspect, "");
  const std::vector<PeakEntry> kept = read_peak_cache(path);
  ASSERT_EQ(kept.size(), 1u);
  EXPECT_DOUBLE_EQ(kept[0].gflops, 101.3);
  EXPECT_DOUBLE_EQ(kept[0].busy, 0.99);
  EXPECT_EQ(kept[0].key.kind, "fp32");
}

// The issue's host: a figure measured under load (31.2) by an older version; an idle start
// replaces it, a busy start keeps it but calls it suspect.
TEST_F(PeakCache, HigherCleanMeasurementReplacesTheCachedFigure) {
  const std::string path = file("peak.jsonl");
  std::ofstream(path) << R"({"host":"n1","cpu":"Test CPU \"X\" @ 2.0GHz","threads":2,"cpus":2,)"
                      << R"("gemm":"oneDNN sgemm","gflops":31.2,"date":"2026-12-01T10:00Z"})"
                      << "\n";
  Measure busy{17.3, "the host had 9 runnable threads on 2 CPUs"};
  const Peak kept = cached_or_measured_peak(path, kKey, busy.fn());
  EXPECT_DOUBLE_EQ(kept.gflops, 31.2);
  EXPECT_NE(kept.suspect.find("did not check for contention"), std::string::npos) << kept.suspect;
  EXPECT_NE(kept.suspect.find("9 runnable threads"), std::string::npos) << kept.suspect;
  Measure idle{120.04};
  const Peak better = cached_or_measured_peak(path, kKey, idle.fn());
  EXPECT_DOUBLE_EQ(better.gflops, 120.0);
  EXPECT_EQ(better.suspect, "");
  EXPECT_EQ(better.source, "measured now, above the 31.2 cached 2026-12-01T10:00Z (cached in " +
                               path + ")");
  const std::vector<PeakEntry> now = read_peak_cache(path);
  ASSERT_EQ(now.size(), 1u);  // replaced, not added
  EXPECT_DOUBLE_EQ(now[0].gflops, 120.0);
  EXPECT_DOUBLE_EQ(now[0].busy, 0.99);
  // A checked entry: a contended start below it is not suspect, and caches nothing.
  const Peak later = cached_or_measured_peak(path, kKey, busy.fn());
  EXPECT_DOUBLE_EQ(later.gflops, 120.0);
  EXPECT_EQ(later.suspect, "");
  EXPECT_NE(later.source.find("(measured now: 17.3, contended: the host had 9"), std::string::npos)
      << later.source;
  EXPECT_EQ(slurp(path).find("17.3"), std::string::npos);
}

TEST_F(PeakCache, ContendedMeasurementIsSuspectAndNeverCached) {
  const std::string path = file("peak.jsonl");
  Measure busy{52.0, "in the best of 5 sgemm trials its thread ran 40% of the time"};
  const Peak p = cached_or_measured_peak(path, kKey, busy.fn());
  EXPECT_DOUBLE_EQ(p.gflops, 52.0);  // the best this start has
  EXPECT_NE(p.suspect.find("measured under contention (in the best of 5"), std::string::npos)
      << p.suspect;
  EXPECT_NE(p.source.find("(not cached: contended)"), std::string::npos) << p.source;
  EXPECT_FALSE(fs::exists(path));
  // Above a cached figure: still not cached, still suspect.
  write_peak_cache(path, {{kKey, 30.0, "2026-12-01T10:00Z", 0.98}});
  const Peak above = cached_or_measured_peak(path, kKey, busy.fn());
  EXPECT_DOUBLE_EQ(above.gflops, 52.0);
  EXPECT_NE(above.suspect, "");
  ASSERT_EQ(read_peak_cache(path).size(), 1u);
  EXPECT_DOUBLE_EQ(read_peak_cache(path)[0].gflops, 30.0);
}

// Issue 33 adds other kinds (bf16); an entry of another kind is not this one's.
TEST_F(PeakCache, KindIsPartOfTheKey) {
  const std::string path = file("peak.jsonl");
  PeakKey bf16 = kKey;
  bf16.kind = "bf16";
  write_peak_cache(path, {{bf16, 500.0, "2026-12-01T10:00Z", 0.99}});
  EXPECT_NE(slurp(path).find("\"kind\":\"bf16\""), std::string::npos) << slurp(path);
  Measure m{100.0};
  EXPECT_DOUBLE_EQ(cached_or_measured_peak(path, kKey, m.fn()).gflops, 100.0);
  EXPECT_EQ(read_peak_cache(path).size(), 2u);
}

// The real measurement with two busy loops on this thread's CPU: it must see the contention and
// leave the cache alone.
TEST_F(PeakCache, RealMeasurementUnderContentionDoesNotPoisonTheCache) {
  const std::string path = file("peak.jsonl");
  const PinnedTo pinned(allowed_cpus().front());
  const BusyLoops loops(2);  // forked after pinning: on the same CPU
  const Peak p = cached_or_measured_peak(path, kKey, [] { return measure_cpu_peak(1, 1); });
  EXPECT_GT(p.gflops, 0.0);
  EXPECT_NE(p.suspect.find("its thread ran"), std::string::npos) << p.suspect;
  EXPECT_NE(p.source.find("not cached: contended"), std::string::npos) << p.source;
  EXPECT_FALSE(fs::exists(path));
}

TEST(PeakMeasure, TrialsJudgedByCpuTimeAndHostLoad) {
  // Alone: 1 thread busy 0.99 of the time; the best trial (2nd) counts.
  const std::vector<SgemmTrial> alone{{40.0, 0.05, 0.0495}, {50.0, 0.04, 0.0398}};
  PeakMeasurement m = judge_trials(alone, 1, 2, 1, 2);
  EXPECT_DOUBLE_EQ(m.gflops, 50.0);
  EXPECT_NEAR(m.busy, 0.995, 1e-12);
  EXPECT_EQ(m.contention, "");
  // Half the time on the CPU: contended.
  m = judge_trials({{20.0, 0.1, 0.05}}, 1, 1, -1, 0);
  EXPECT_EQ(m.contention, "in the best of 1 sgemm trials its thread ran 50% of the time (others "
                          "took the CPU)");
  // 4 threads on 2 CPUs: 2 run at once, 2 CPU-seconds a second is all of it.
  EXPECT_EQ(judge_trials({{20.0, 1.0, 1.98}}, 4, 2, -1, 0).contention, "");
  EXPECT_NE(judge_trials({{20.0, 1.0, 1.5}}, 4, 2, -1, 0).contention.find("its 2 threads ran 75%"),
            std::string::npos);
  // The host busier than its CPUs, though this thread ran throughout.
  EXPECT_EQ(judge_trials(alone, 1, 2, 5, 2).contention, "the host had 5 runnable threads on 2 CPUs");
  EXPECT_EQ(judge_trials(alone, 1, 2, 2, 2).contention, "");
}

TEST_F(PeakCache, RunnableThreadsFromProcStat) {
  std::ofstream(file("stat")) << "cpu  1 2 3\nctxt 99\nprocs_running 7\nprocs_blocked 0\n";
  EXPECT_EQ(runnable_threads(file("stat")), 7);
  EXPECT_EQ(runnable_threads(file("missing")), -1);
  EXPECT_GE(runnable_threads(), 1);  // this thread, at least
}

TEST_F(PeakCache, OtherThreadsCpuModelOrAffinityNotReused) {
  const std::string path = file("peak.jsonl");
  write_peak_cache(path, {{kKey, 100.0, "2026-12-01T10:00Z"}});
  const std::string cpu = kKey.cpu_model, lib = kKey.gemm;
  for (PeakKey other : {PeakKey{"n1", cpu, 4, 2, lib},             // threads
                        PeakKey{"n1", "Another CPU", 2, 2, lib},   // CPU model
                        PeakKey{"n1", cpu, 2, 1, lib},             // affinity count
                        PeakKey{"n2", cpu, 2, 2, lib},             // host
                        PeakKey{"n1", cpu, 2, 2, kOldCpuGemm}}) {  // sgemm library
    Measure m{7.0};
    const Peak p = cached_or_measured_peak(path, other, m.fn());
    EXPECT_EQ(m.calls, 1) << other.cpu_model << " " << other.threads << " " << other.cpus;
    EXPECT_DOUBLE_EQ(p.gflops, 7.0);
  }
  const std::vector<PeakEntry> all = read_peak_cache(path);
  ASSERT_EQ(all.size(), 6u);  // each added beside the first, which stays
  EXPECT_EQ(all[0].key, kKey);
  EXPECT_DOUBLE_EQ(all[0].gflops, 100.0);
}

// Versions before the oneDNN sgemm wrote no "gemm": their rate is OpenBLAS's, not oneDNN's.
TEST_F(PeakCache, EntryWithoutGemmIsOpenBlasAndNotReused) {
  const std::string path = file("peak.jsonl");
  std::ofstream(path) << R"({"host":"n1","cpu":"Test CPU \"X\" @ 2.0GHz","threads":2,"cpus":2,)"
                      << R"("gflops":100.0,"date":"2026-12-01T10:00Z"})" << "\n";
  const std::vector<PeakEntry> old = read_peak_cache(path);
  ASSERT_EQ(old.size(), 1u);
  EXPECT_EQ(old[0].key.gemm, kOldCpuGemm);
  Measure m{200.0};
  EXPECT_DOUBLE_EQ(cached_or_measured_peak(path, kKey, m.fn()).gflops, 200.0);
  EXPECT_EQ(m.calls, 1);
}

// A rate measured on another OpenBLAS kernel (a fallback one, or one the user forced) is not this
// kernel's: the key names the kernel (cpu_sgemm_kernel(), backend/blas_kernel.hpp).
TEST_F(PeakCache, OtherOpenBlasKernelNotReused) {
  const std::string path = file("peak.jsonl");
  PeakKey haswell = kKey, skylakex = kKey;
  haswell.gemm = "OpenBLAS sgemm Haswell";
  skylakex.gemm = "OpenBLAS sgemm SkylakeX";
  write_peak_cache(path, {{haswell, 300.0, "2026-12-01T10:00Z"}});
  Measure m{200.0};
  EXPECT_DOUBLE_EQ(cached_or_measured_peak(path, skylakex, m.fn()).gflops, 200.0);
  EXPECT_EQ(m.calls, 1);
  const std::string library = cpu_sgemm_library();
  EXPECT_EQ(cpu_sgemm_kernel(),
            library == "oneDNN sgemm" ? library : library + " " + openblas_get_corename());
}

TEST_F(PeakCache, CorruptFileIgnoredAndReplaced) {
  const std::string path = file("peak.jsonl");
  for (const char* bad : {"not json\n", "{\"host\":\"n1\"}\n", "[1,2]\n",
                          "{\"host\":\"n1\",\"cpu\":\"c\",\"threads\":2.5,\"cpus\":1,"
                          "\"gflops\":1,\"date\":\"d\"}\n"}) {
    std::ofstream(path) << bad;
    EXPECT_THROW(read_peak_cache(path), Error) << bad;
    Measure m{9.0};
    const Peak p = cached_or_measured_peak(path, kKey, m.fn());
    EXPECT_EQ(m.calls, 1);
    EXPECT_DOUBLE_EQ(p.gflops, 9.0);
    EXPECT_NE(p.note.find("peak cache ignored"), std::string::npos) << p.note;
    EXPECT_NE(p.note.find(path + " line 1"), std::string::npos) << p.note;
    EXPECT_EQ(p.note.find('\n'), std::string::npos) << p.note;
    if (bad[0] == 'n') {  // the parser's own text, with its position
      EXPECT_NE(p.note.find(path + " line 1: not JSON: "), std::string::npos) << p.note;
      EXPECT_NE(p.note.find("parse error at line 1, column 2"), std::string::npos) << p.note;
    }
    ASSERT_EQ(read_peak_cache(path).size(), 1u);  // replaced by a valid file
  }
}

TEST_F(PeakCache, UnreadableOrUnwritableIsNotFatal) {
  // A directory where the file should be: cannot be read nor replaced.
  const std::string path = file("is-a-dir");
  fs::create_directories(path);
  Measure m{5.0};
  Peak p;
  EXPECT_NO_THROW(p = cached_or_measured_peak(path, kKey, m.fn()));
  EXPECT_DOUBLE_EQ(p.gflops, 5.0);
  EXPECT_EQ(p.source.rfind("measured now (not cached: ", 0), 0u) << p.source;
  // A parent that is a file: the directory cannot be made.
  std::ofstream(file("plain")) << "x";
  EXPECT_NO_THROW(p = cached_or_measured_peak(file("plain/peak.jsonl"), kKey, m.fn()));
  EXPECT_NE(p.source.find("not cached: cannot create"), std::string::npos) << p.source;
  // No location at all.
  EXPECT_NO_THROW(p = cached_or_measured_peak("", kKey, m.fn()));
  EXPECT_EQ(p.source.rfind("measured now (not cached: none of", 0), 0u) << p.source;
  EXPECT_EQ(m.calls, 3);
}

TEST_F(PeakCache, ResolveOverMpiMeasuresOncePerHost) {
  mpitrain::test::start_mpi();
  const MpiComm node = MpiComm::world().split_shared();
  const std::string path = file("peak.jsonl");
  // Every rank of the host must name the same file: the lowest world rank's directory.
  std::string shared = path;
  int length = static_cast<int>(shared.size());
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, 0, node.get()));
  shared.resize(length);
  MPI_CHECK(MPI_Bcast(shared.data(), length, MPI_CHAR, 0, node.get()));
  ASSERT_EQ(setenv("MPITRAIN_PEAK_CACHE", shared.c_str(), 1), 0);
  const int threads = 1;
  const NodeCpus cpus = gather_node_cpus(node);
  Measure m{42.0};
  EXPECT_EQ(resolve_cpu_peak(17.5, node, cpus, threads, m.fn()).source, "given by --peak-gflops");
  const Peak first = resolve_cpu_peak(0.0, node, cpus, threads, m.fn());
  EXPECT_DOUBLE_EQ(first.rate, 42.0);
  EXPECT_DOUBLE_EQ(first.gflops, 42.0 * cpu_share(cpus));  // 1 thread: 42 a CPU
  int calls = m.calls;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_INT, MPI_SUM, node.get()));
  EXPECT_EQ(calls, 1);  // ranks alike (threads, CPUs) on one host: one measurement
  const Peak again = resolve_cpu_peak(0.0, node, cpus, threads, m.fn());
  EXPECT_EQ(again.source.rfind("cached ", 0), 0u) << again.source;
  EXPECT_DOUBLE_EQ(again.rate, 42.0);
  const std::vector<PeakEntry> entries = read_peak_cache(shared);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].key.host, mpi_host_name());
  EXPECT_EQ(entries[0].key.cpus, static_cast<int>(allowed_cpus().size()));
  ASSERT_EQ(unsetenv("MPITRAIN_PEAK_CACHE"), 0);
  MPI_CHECK(MPI_Barrier(node.get()));  // rank 0 removes the directory only after all have read
}

// Issue 32: 4 ranks x 1 thread unbound on 2 CPUs summed 4 single-thread rates (124.8 GFLOP/s
// "in all" on 2 cores). Each CPU counts once: a rank's part is the rate per CPU x 1/2 CPU.
TEST_F(PeakCache, ResolveCountsEachCpuOfTheHostOnce) {
  mpitrain::test::start_mpi();
  const MpiComm node = MpiComm::world().split_shared();
  if (node.size() != 1) GTEST_SKIP() << "a node of one process is what this test pretends in";
  NodeCpus four_on_two;  // this process as rank 0 of 4 that share CPUs 0-1
  four_on_two.host = "n1";
  four_on_two.world_ranks = {0, 1, 2, 3};
  four_on_two.cpus.assign(4, {0, 1});
  ASSERT_EQ(setenv("MPITRAIN_PEAK_CACHE", file("peak.jsonl").c_str(), 1), 0);
  Measure m{31.2};
  const Peak p = resolve_cpu_peak(0.0, node, four_on_two, 1, m.fn());
  EXPECT_DOUBLE_EQ(p.rate, 31.2);
  EXPECT_DOUBLE_EQ(p.cpus, 0.5);
  EXPECT_DOUBLE_EQ(4 * p.gflops, 2 * 31.2);  // the host: 2 CPUs at 31.2, not 4 x 31.2
  // 2 threads on the 2 CPUs of a lone rank: the rate is already the host's.
  NodeCpus alone = four_on_two;
  alone.world_ranks = {0};
  alone.cpus = {{0, 1}};
  Measure two{60.0};
  EXPECT_DOUBLE_EQ(resolve_cpu_peak(0.0, node, alone, 2, two.fn()).gflops, 60.0);
  ASSERT_EQ(unsetenv("MPITRAIN_PEAK_CACHE"), 0);
}
