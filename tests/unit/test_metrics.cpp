// metrics.jsonl's energy fields: present with the power and joules per token that the step's
// energy implies, absent where a GPU has no meter (gpu_joules < 0); a non-finite value as null.
// A resumed run's record: the steps after the checkpoint dropped, the segment counted on, the
// earlier segments' wall time carried into run_time_s and the report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "mpitrain/monitor/json_number.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/metrics.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The step record that MetricsLog writes for r, parsed.
std::string record_of(const StepRecord& r) {
  const fs::path path =
      fs::temp_directory_path() / ("mpitrain_metrics_" + std::to_string(::getpid()) + ".jsonl");
  {
    MetricsLog log(path.string(), true);
    log.step(r);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  fs::remove(path);
  return text.str();
}

StepRecord step_with_energy(double joules) {
  StepRecord r{1, 10, 3.5, 1e-3, 0.9, 1000.0, 500.0, 20.0, 0.4};  // 500 ms, 500 tokens
  r.gpu_joules = joules;
  return r;
}

}  // namespace

TEST(MetricsEnergy, PowerAndJoulesPerToken) {
  const std::string line = record_of(step_with_energy(350.0));
  const json v = json::parse(line);
  ASSERT_TRUE(v.contains("gpu_power_w")) << line;
  ASSERT_TRUE(v.contains("joules_per_token")) << line;
  EXPECT_NEAR(v.at("gpu_power_w").get<double>(), 700.0, 1e-9);      // 350 J / 0.5 s
  EXPECT_NEAR(v.at("joules_per_token").get<double>(), 0.7, 1e-12);  // 350 J / 500 tokens
  EXPECT_NEAR(v.at("loss").get<double>(), 3.5, 0.0);
}

TEST(MetricsEnergy, LeftOutWithoutMeters) {
  const std::string line = record_of(step_with_energy(-1.0));
  const json v = json::parse(line);
  EXPECT_FALSE(v.contains("gpu_power_w")) << line;
  EXPECT_FALSE(v.contains("joules_per_token")) << line;
  EXPECT_TRUE(v.contains("skipped_steps")) << line;  // the record is still complete
}

TEST(MetricsNonFinite, WrittenAsNullAndStillJson) {
  StepRecord r = step_with_energy(-1.0);
  r.loss = std::numeric_limits<double>::quiet_NaN();
  r.grad_norm = -std::numeric_limits<double>::quiet_NaN();
  r.lr = std::numeric_limits<double>::infinity();
  const std::string line = record_of(r);
  const json v = json::parse(line);  // throws on nan / inf
  EXPECT_TRUE(v.at("loss").is_null()) << line;
  EXPECT_TRUE(v.at("grad_norm").is_null()) << line;
  EXPECT_TRUE(v.at("lr").is_null()) << line;
  EXPECT_TRUE(v.at("tokens_per_s").is_number()) << line;
}

namespace {

std::vector<json> records_of(const fs::path& path) {
  std::vector<json> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) records.push_back(json::parse(line));
  return records;
}

// Steps first..last of 500 tokens each in 500 ms.
void log_steps(MetricsLog& log, int first, int last) {
  for (int step = first; step <= last; ++step) {
    StepRecord r = step_with_energy(-1.0);
    r.step = step;
    r.tokens_seen = 500u * step;
    log.step(r);
  }
}

}  // namespace

// Segment 1 runs steps 1-7 (started 20 s ago), segment 2 resumes from step 3 (started 5 s ago):
// steps 4-7 of segment 1 are dropped, 4-8 are segment 2's, whose run_time_s and report carry
// segment 1's time up to step 3 (about 20 s).
TEST(MetricsSegments, ResumeCountsTheSegmentAndCarriesTheTime) {
  const fs::path dir =
      fs::temp_directory_path() / ("mpitrain_segments_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path path = dir / "metrics.jsonl", report = dir / "report.json";
  const auto now = std::chrono::steady_clock::now();
  {
    MetricsLog first(path.string(), true, -1, nullptr, 1, now - std::chrono::seconds(20));
    log_steps(first, 1, 7);
  }
  const std::vector<json> one = records_of(path);
  ASSERT_EQ(one.size(), 7u);
  for (const json& r : one) {
    EXPECT_EQ(r.at("segment"), 1);
    // Measured 1 ms over the 20 s given; 1 s leaves room for a loaded machine (ctest -j).
    EXPECT_NEAR(r.at("run_time_s").get<double>(), 20.0, 1.0);
    EXPECT_EQ(r.at("tokens_seen").get<uint64_t>(), 500u * r.at("step").get<uint64_t>());
  }
  {
    MetricsLog second(path.string(), true, 3, nullptr, 1, now - std::chrono::seconds(5));
    log_steps(second, 4, 8);
    second.finish(report.string(), 0, kExitOk);
  }
  const std::vector<json> two = records_of(path);
  ASSERT_EQ(two.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(two[i].at("step"), i + 1);
    if (i < 3) {
      EXPECT_EQ(two[i], one[i]);  // kept as written
    } else {
      EXPECT_EQ(two[i].at("segment"), 2);
      const double carried = one[2].at("run_time_s").get<double>();
      EXPECT_NEAR(two[i].at("run_time_s").get<double>(), carried + 5.0, 1.0);
    }
  }
  std::ifstream in(report);
  const json rep = json::parse(in);
  EXPECT_EQ(rep.at("tokens_seen"), 4000);
  EXPECT_EQ(rep.at("segment").at("number"), 2);
  EXPECT_EQ(rep.at("segment").at("tokens"), 2500);  // steps 4-8
  EXPECT_NEAR(rep.at("segment").at("wall_time_s").get<double>(), 5.0, 1.0);
  EXPECT_EQ(rep.at("run").at("segments"), 2);
  EXPECT_EQ(rep.at("run").at("first_step"), 1);
  EXPECT_EQ(rep.at("run").at("tokens"), 4000);
  EXPECT_NEAR(rep.at("run").at("wall_time_s").get<double>(), 25.0, 1.0);
  fs::remove_all(dir);
}

// Records written before segments were recorded: the resumed run counts as the first segment.
TEST(MetricsSegments, RecordsWithoutSegmentsTellNone) {
  const fs::path path =
      fs::temp_directory_path() / ("mpitrain_oldrecord_" + std::to_string(::getpid()) + ".jsonl");
  std::ofstream(path) << "{\"step\": 1, \"loss\": 5.0, \"tokens_per_s\": 1000, \"step_ms\": 500}\n";
  {
    MetricsLog log(path.string(), true, 1);
    log_steps(log, 2, 2);
  }
  const std::vector<json> records = records_of(path);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].at("segment"), 1);
  fs::remove(path);
}

TEST(MetricsNonFinite, JsonNumber) {
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(0.125), "0.125");
  EXPECT_EQ(json_number(3.14159265358979, 9), "3.14159265");
}

// A mixture-of-experts step: the layers' losses summed, the worst imbalance, and per layer its
// tokens per expert with their max and mean; a dense step has none of these fields.
TEST(MetricsMoe, LayersLossesAndTokensPerExpert) {
  StepRecord r = step_with_energy(-1.0);
  EXPECT_EQ(record_of(r).find("moe"), std::string::npos);
  r.moe = {{1, 2.25, 0.5, {10, 30, 20, 20}}, {3, 2.5, 0.25, {40, 0, 20, 20}}};
  const std::string line = record_of(r);
  const json v = json::parse(line);
  EXPECT_DOUBLE_EQ(v.at("moe_aux_loss").get<double>(), 4.75) << line;
  EXPECT_DOUBLE_EQ(v.at("moe_z_loss").get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(v.at("moe_imbalance").get<double>(), 2.0);  // layer 3: 40 / 20
  ASSERT_EQ(v.at("moe_layers").size(), 2u);
  const json& first = v.at("moe_layers")[0];
  EXPECT_EQ(first.at("layer").get<int>(), 1);
  EXPECT_DOUBLE_EQ(first.at("aux_loss").get<double>(), 2.25);
  EXPECT_DOUBLE_EQ(first.at("tokens_max").get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(first.at("tokens_mean").get<double>(), 20.0);
  EXPECT_EQ(first.at("tokens").get<std::vector<int64_t>>(), (std::vector<int64_t>{10, 30, 20, 20}));
  EXPECT_DOUBLE_EQ(v.at("loss").get<double>(), 3.5);  // the cross-entropy alone
}
