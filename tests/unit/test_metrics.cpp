// metrics.jsonl's energy fields: present with the power and joules per token that the step's
// energy implies, absent where a GPU has no meter (gpu_joules < 0).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
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
