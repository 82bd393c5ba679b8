// metrics.jsonl's energy fields: present with the power and joules per token that the step's
// energy implies, absent where a GPU has no meter (gpu_joules < 0); a non-finite value as null.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "mpitrain/monitor/json_number.hpp"
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

TEST(MetricsNonFinite, JsonNumber) {
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(0.125), "0.125");
  EXPECT_EQ(json_number(3.14159265358979, 9), "3.14159265");
}
