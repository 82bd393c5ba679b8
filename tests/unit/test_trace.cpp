// Trace recording (monitor/trace.hpp): per-rank Chrome-trace files, read back as JSON.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/runtime/error.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mpitrain-trace-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace

TEST(TraceScope, AddsSecondsWithoutARecorder) {
  double seconds = 0.0;
  {
    TraceScope scope(nullptr, TraceLane::Compute, "x", &seconds);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_GE(seconds, 0.019);
  EXPECT_LT(seconds, 1.0);
  TraceRecorder off;
  EXPECT_FALSE(off.on());
  { TraceScope scope(&off, TraceLane::Io, "y", &seconds); }  // off: only the seconds
  off.close();
}

TEST_F(TraceTest, EventsOnFourLanesAcrossBufferFlushes) {
  mpitrain::test::start_mpi();
  MpiCommunicator world(MPI_COMM_WORLD);
  double compute = 0.0;
  {
    TraceRecorder trace;
    trace.open((dir_ / "t").string(), 3, "rank 3 (dp 1 tp 0 pp 1)", 4);  // 4: flushes often
    ASSERT_TRUE(trace.on());
    trace.start(world);
    for (int i = 0; i < 5; ++i) {
      TraceScope step(&trace, TraceLane::Compute, "forward", &compute, i);
      { TraceScope c(&trace, TraceLane::Comm, "pp recv activations", nullptr, i); }
      { TraceScope d(&trace, TraceLane::Data, "load batch", nullptr, i); }
      { TraceScope io(&trace, TraceLane::Io, "checkpoint save"); }
    }
    // the destructor closes the file
  }
  EXPECT_GT(compute, 0.0);
  std::ifstream in(dir_ / "t" / "trace-rank3.json");
  const json doc = json::parse(in);
  ASSERT_TRUE(doc.is_array());
  std::map<int, std::string> lanes;
  std::map<std::string, int> counts;
  std::string process;
  for (const json& e : doc) {
    ASSERT_TRUE(e.is_object());
    EXPECT_EQ(e.at("pid"), 3);
    const auto ph = e.at("ph").get<std::string>(), name = e.at("name").get<std::string>();
    const int tid = e.at("tid").get<int>();
    if (ph == "M") {
      if (name == "thread_name") lanes[tid] = e.at("args").at("name").get<std::string>();
      if (name == "process_name") process = e.at("args").at("name").get<std::string>();
      continue;
    }
    ASSERT_EQ(ph, "X");
    ++counts[name];
    EXPECT_GE(e.at("ts").get<double>(), 0.0);
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    const int want_tid = name == "forward"               ? 0
                         : name == "pp recv activations" ? 1
                         : name == "load batch"          ? 2
                                                         : 3;
    EXPECT_EQ(tid, want_tid) << name;
    if (name != "checkpoint save")
      EXPECT_TRUE(e.contains("args") && e.at("args").contains("i")) << e.dump();
    else
      EXPECT_FALSE(e.contains("args")) << e.dump();
  }
  EXPECT_EQ(process, "rank 3 (dp 1 tp 0 pp 1)");
  EXPECT_EQ(lanes,
            (std::map<int, std::string>{{0, "compute"}, {1, "comm"}, {2, "data"}, {3, "io"}}));
  EXPECT_EQ(
      counts,
      (std::map<std::string, int>{
          {"forward", 5}, {"pp recv activations", 5}, {"load batch", 5}, {"checkpoint save", 5}}));
}

TEST_F(TraceTest, UnwritableDirectoryIsAUsageError) {
  std::ofstream(dir_ / "file") << "x";
  TraceRecorder trace;
  EXPECT_THROW(trace.open((dir_ / "file" / "t").string(), 0, "rank 0"), UsageError);
  EXPECT_FALSE(trace.on());
}
