// Trace recording (monitor/trace.hpp) and the JSON reader the trace tools use (monitor/json.hpp).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/monitor/json.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/runtime/error.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;

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

std::string read_all(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string usage_error(const std::string& text) {
  try {
    parse_json(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

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
  const std::string text = read_all(dir_ / "t" / "trace-rank3.json");
  const JsonValue doc = parse_json(text);
  ASSERT_EQ(doc.kind, JsonValue::Kind::Array);
  std::map<int, std::string> lanes;
  std::map<std::string, int> counts;
  std::string process;
  for (const JsonValue& e : doc.items) {
    ASSERT_EQ(e.kind, JsonValue::Kind::Object);
    EXPECT_EQ(e.find("pid")->number, 3);
    const std::string ph = e.find("ph")->string, name = e.find("name")->string;
    const int tid = static_cast<int>(e.find("tid")->number);
    if (ph == "M") {
      if (name == "thread_name") lanes[tid] = e.find("args")->find("name")->string;
      if (name == "process_name") process = e.find("args")->find("name")->string;
      continue;
    }
    ASSERT_EQ(ph, "X");
    ++counts[name];
    EXPECT_GE(e.find("ts")->number, 0.0);
    EXPECT_GE(e.find("dur")->number, 0.0);
    const int want_tid = name == "forward"               ? 0
                         : name == "pp recv activations" ? 1
                         : name == "load batch"          ? 2
                                                         : 3;
    EXPECT_EQ(tid, want_tid) << name;
    if (name != "checkpoint save")
      EXPECT_NE(e.find("args")->find("i"), nullptr);
    else
      EXPECT_EQ(e.find("args"), nullptr);
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

TEST(Json, ParsesEveryKindOfValue) {
  const std::string text =
      R"( {"a": [1, -2.5e3, 0, true, false, null], "s": "x\"\\\/\n\u00e9\ud83d\ude00", "o": {}})";
  const JsonValue v = parse_json(text);
  ASSERT_EQ(v.kind, JsonValue::Kind::Object);
  const JsonValue* a = v.find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->items.size(), 6u);
  EXPECT_EQ(a->items[1].number, -2500.0);
  EXPECT_EQ(a->items[1].text, "-2.5e3");
  EXPECT_TRUE(a->items[3].boolean);
  EXPECT_EQ(a->items[5].kind, JsonValue::Kind::Null);
  EXPECT_EQ(v.find("s")->string, "x\"\\/\n\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v.find("o")->kind, JsonValue::Kind::Object);
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(v.find("o")->text, "{}");
}

TEST(Json, RejectsMalformedInputWithAPosition) {
  EXPECT_EQ(usage_error("[1, 2,]"), "invalid number at line 1, column 7");
  EXPECT_EQ(usage_error("{\"a\": 1,\n \"b\" 2}"), "expected ':' at line 2, column 6");
  EXPECT_NE(usage_error("[1] x"), "");
  EXPECT_NE(usage_error("[01]"), "");
  EXPECT_NE(usage_error("\"tab\there\""), "");
  EXPECT_NE(usage_error("\"\\ud800\""), "");
  EXPECT_NE(usage_error("[1, 2"), "");
  EXPECT_NE(usage_error(""), "");
  EXPECT_NE(usage_error("nul"), "");
  EXPECT_NE(usage_error(std::string(1000, '[') + std::string(1000, ']')), "");  // too deep
}
