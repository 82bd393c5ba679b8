// metrics.jsonl's energy fields: present with the power and joules per token that the step's
// energy implies, absent where a GPU has no meter (gpu_joules < 0); a non-finite value as null.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <fstream>
#include <sstream>
#include <string>

#include "mpitrain/monitor/json.hpp"
#include "mpitrain/train/metrics.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;

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
  const JsonValue v = parse_json(line);
  ASSERT_NE(v.find("gpu_power_w"), nullptr) << line;
  ASSERT_NE(v.find("joules_per_token"), nullptr) << line;
  EXPECT_NEAR(v.find("gpu_power_w")->number, 700.0, 1e-9);     // 350 J / 0.5 s
  EXPECT_NEAR(v.find("joules_per_token")->number, 0.7, 1e-12);  // 350 J / 500 tokens
  EXPECT_NEAR(v.find("loss")->number, 3.5, 0.0);
}

TEST(MetricsEnergy, LeftOutWithoutMeters) {
  const std::string line = record_of(step_with_energy(-1.0));
  const JsonValue v = parse_json(line);
  EXPECT_EQ(v.find("gpu_power_w"), nullptr) << line;
  EXPECT_EQ(v.find("joules_per_token"), nullptr) << line;
  EXPECT_NE(v.find("skipped_steps"), nullptr) << line;  // the record is still complete
}

TEST(MetricsNonFinite, WrittenAsNullAndStillJson) {
  StepRecord r = step_with_energy(-1.0);
  r.loss = std::numeric_limits<double>::quiet_NaN();
  r.grad_norm = -std::numeric_limits<double>::quiet_NaN();
  r.lr = std::numeric_limits<double>::infinity();
  const std::string line = record_of(r);
  const JsonValue v = parse_json(line);  // throws on nan / inf
  EXPECT_EQ(v.find("loss")->kind, JsonValue::Kind::Null) << line;
  EXPECT_EQ(v.find("grad_norm")->kind, JsonValue::Kind::Null) << line;
  EXPECT_EQ(v.find("lr")->kind, JsonValue::Kind::Null) << line;
  EXPECT_EQ(v.find("tokens_per_s")->kind, JsonValue::Kind::Number) << line;
}

TEST(MetricsNonFinite, JsonNumber) {
  EXPECT_EQ(json_number(std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(-std::numeric_limits<double>::infinity()), "null");
  EXPECT_EQ(json_number(std::nan("")), "null");
  EXPECT_EQ(json_number(0.125), "0.125");
  EXPECT_EQ(json_number(3.14159265358979, 9), "3.14159265");
}
