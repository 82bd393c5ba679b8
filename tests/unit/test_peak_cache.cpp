// The MFU peak cache: where it lives, entries written and read back, which entries are reused,
// a bad or unwritable file, and the node-level resolution over MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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

// A measurement that counts its calls.
struct Measure {
  double value;
  int calls = 0;
  std::function<double()> fn() {
    return [this] {
      ++calls;
      return value;
    };
  }
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
  const std::vector<PeakEntry> entries = {{kKey, 123.4, "2026-12-01T10:00Z"},
                                          {{"n2", "Y", 1, 4, "oneDNN sgemm"}, 50.0, "2026-12-02T11:30Z"}};
  write_peak_cache(path, entries);
  const std::vector<PeakEntry> back = read_peak_cache(path);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].key, kKey);
  EXPECT_DOUBLE_EQ(back[0].gflops, 123.4);
  EXPECT_EQ(back[0].date, "2026-12-01T10:00Z");
  EXPECT_EQ(back[1].key, (PeakKey{"n2", "Y", 1, 4, "oneDNN sgemm"}));
  EXPECT_EQ(slurp(path).substr(0, slurp(path).find('\n')),
            R"({"host":"n1","cpu":"Test CPU \"X\" @ 2.0GHz","threads":2,"cpus":2,)"
            R"("gemm":"oneDNN sgemm","gflops":123.4,"date":"2026-12-01T10:00Z"})");
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

TEST_F(PeakCache, MeasuresOnceThenReuses) {
  const std::string path = file("peak.jsonl");
  Measure m{101.26};
  const Peak first = cached_or_measured_peak(path, kKey, m.fn());
  EXPECT_EQ(m.calls, 1);
  EXPECT_DOUBLE_EQ(first.gflops, 101.3);  // rounded as stored
  EXPECT_EQ(first.source, "measured now (cached in " + path + ")");
  EXPECT_EQ(first.note, "");
  const Peak second = cached_or_measured_peak(path, kKey, m.fn());
  EXPECT_EQ(m.calls, 1);
  EXPECT_DOUBLE_EQ(second.gflops, first.gflops);
  EXPECT_TRUE(std::regex_match(second.source,
                               std::regex("cached \\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\dZ in .*")))
      << second.source;
  EXPECT_NE(second.source.find(path), std::string::npos);
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
  Measure m{42.0};
  EXPECT_EQ(resolve_cpu_peak(17.5, node, threads, m.fn()).source, "given by --peak-gflops");
  const Peak first = resolve_cpu_peak(0.0, node, threads, m.fn());
  EXPECT_DOUBLE_EQ(first.gflops, 42.0);
  int calls = m.calls;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &calls, 1, MPI_INT, MPI_SUM, node.get()));
  EXPECT_EQ(calls, 1);  // ranks alike (threads, CPUs) on one host: one measurement
  const Peak again = resolve_cpu_peak(0.0, node, threads, m.fn());
  EXPECT_EQ(again.source.rfind("cached ", 0), 0u) << again.source;
  EXPECT_DOUBLE_EQ(again.gflops, 42.0);
  const std::vector<PeakEntry> entries = read_peak_cache(shared);
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].key.host, mpi_host_name());
  EXPECT_EQ(entries[0].key.cpus, static_cast<int>(allowed_cpus().size()));
  ASSERT_EQ(unsetenv("MPITRAIN_PEAK_CACHE"), 0);
  MPI_CHECK(MPI_Barrier(node.get()));  // rank 0 removes the directory only after all have read
}
