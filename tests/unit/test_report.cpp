// The end-of-run report: statistics without the warm-up step, the JSON file, the console summary,
// the set-up's time; after a resume, the tokens and wall time of this segment and of the whole
// run, each rate of its own figures.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "mpitrain/monitor/report.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

class ReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mpitrain-report-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs finish(); returns the console text and leaves the parsed file in json_.
  std::string finish(const RunReport& r, int skipped, int exit_code) {
    std::FILE* out = std::tmpfile();
    EXPECT_NE(out, nullptr);
    r.finish((dir_ / "report.json").string(), skipped, exit_code, out);
    std::rewind(out);
    std::string console;
    for (int c; (c = std::fgetc(out)) != EOF;) console.push_back(static_cast<char>(c));
    std::fclose(out);
    std::ifstream in(dir_ / "report.json");
    json_ = json::parse(in);
    return console;
  }
  // json_[a] (or json_[a][b]): a number, else a failure and -1.
  double number(const char* a, const char* b = nullptr) const {
    const json::json_pointer at(std::string("/") + a + (b ? std::string("/") + b : ""));
    const json v = json_.contains(at) ? json_[at] : json();
    EXPECT_TRUE(v.is_number()) << a << " " << (b ? b : "") << ": " << v.dump();
    return v.is_number() ? v.get<double>() : -1.0;
  }

  fs::path dir_;
  json json_;
};

StepFigures figures(int step, double step_ms, double comm_ms) {
  return {step,          step_ms, 1e6 / step_ms,  0.01 * step, 0.3 * step_ms, 0.5 * step_ms,
          0.1 * step_ms, comm_ms, 0.01 * step_ms, 0.0,         100.0 + step,  4.0 * (6 - step)};
}

}  // namespace

TEST(Percentile, InterpolatesBetweenClosestRanks) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile({10, 20, 30, 40, 50}, 90), 46.0);  // at = 3.6
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  std::vector<double> v(101);
  for (int i = 0; i <= 100; ++i) v[i] = i;
  EXPECT_DOUBLE_EQ(percentile(v, 99), 99.0);
}

TEST_F(ReportTest, LeavesOutTheWarmUpStep) {
  RunReport r;
  r.add_step(figures(1, 1000.0, 0.0));  // warm-up: 1 s
  for (int i = 2; i <= 5; ++i) r.add_step(figures(i, 10.0 * (i - 1), 1.0 * (i - 1)));  // 10..40 ms
  r.add_checkpoint_stall(0.5);  // a synchronous save: its write is its stall
  r.add_checkpoint_written(0.5, 1000);
  r.add_checkpoint_stall(0.05);  // a background one
  r.add_checkpoint_written(0.25, 1000);
  const std::string console = finish(r, 0, kExitOk);
  EXPECT_EQ(number("steps"), 5);
  EXPECT_EQ(number("first_step"), 1);
  EXPECT_EQ(number("last_step"), 5);
  EXPECT_EQ(number("warmup_steps_excluded"), 1);
  EXPECT_EQ(number("measured_steps"), 4);
  EXPECT_NE(json_.at("statistics_over").get<std::string>().find("steps 2-5"), std::string::npos);
  EXPECT_DOUBLE_EQ(number("step_ms", "mean"), 25.0);
  EXPECT_DOUBLE_EQ(number("step_ms", "p50"), 25.0);
  EXPECT_NEAR(number("step_ms", "p90"), 37.0, 1e-9);  // at = 2.7 of {10, 20, 30, 40}
  EXPECT_NEAR(number("step_ms", "p99"), 39.7, 1e-9);
  EXPECT_DOUBLE_EQ(number("step_ms", "max"), 40.0);
  EXPECT_NEAR(number("tokens_per_s", "mean"), (1e5 + 5e4 + 1e6 / 30 + 2.5e4) / 4, 1e-1);
  EXPECT_NEAR(number("tokens_per_s", "p50"), (5e4 + 1e6 / 30) / 2, 1e-1);
  EXPECT_NEAR(number("mfu", "mean"), 0.035, 1e-9);  // steps 2..5: 0.02..0.05
  EXPECT_NEAR(number("breakdown_ms_mean", "forward"), 7.5, 1e-9);
  EXPECT_NEAR(number("breakdown_ms_mean", "exposed_comm"), 2.5, 1e-9);
  EXPECT_NEAR(number("exposed_comm_share"), 0.1, 1e-9);  // 10 of 100 ms
  EXPECT_FALSE(json_.at("exposed_comm_warning").get<bool>());
  EXPECT_DOUBLE_EQ(number("peak_rss_mib"), 105.0);  // the largest, warm-up step included
  EXPECT_DOUBLE_EQ(number("host_scratch_mib"), 20.0);  // likewise: step 1's
  EXPECT_EQ(number("skipped_steps"), 0);
  EXPECT_EQ(number("checkpoints", "written"), 2);
  EXPECT_DOUBLE_EQ(number("checkpoints", "stall_seconds"), 0.55);
  EXPECT_DOUBLE_EQ(number("checkpoints", "write_seconds"), 0.75);
  EXPECT_EQ(number("checkpoints", "bytes"), 2000);
  EXPECT_FALSE(json_.at("stopped_early").get<bool>());
  EXPECT_EQ(number("exit_code"), 0);
  EXPECT_NE(console.find("mean 25.00 ms"), std::string::npos) << console;
  EXPECT_NE(console.find("peak RSS 105.0 MiB, host scratch 20.0 MiB"), std::string::npos)
      << console;
  EXPECT_NE(console.find("checkpoints written 2 (0.00 GB, writing 0.75 s, the steps stalled 0.55 s)"), std::string::npos) << console;
  EXPECT_EQ(console.find("WARNING"), std::string::npos) << console;
}

TEST_F(ReportTest, WarnsAboveThirtyPercentExposedCommunication) {
  RunReport r;
  for (int i = 1; i <= 3; ++i) r.add_step(figures(10 + i, 100.0, i == 1 ? 0.0 : 31.0));
  const std::string console = finish(r, 2, kExitRequeue);
  EXPECT_NEAR(number("exposed_comm_share"), 0.31, 1e-9);
  EXPECT_TRUE(json_.at("exposed_comm_warning").get<bool>());
  EXPECT_TRUE(json_.at("stopped_early").get<bool>());
  EXPECT_EQ(number("exit_code"), 85);
  EXPECT_EQ(number("skipped_steps"), 2);
  EXPECT_NE(console.find("WARNING: exposed communication is 31.0% of the step time"),
            std::string::npos)
      << console;
}

TEST_F(ReportTest, OneStepKeepsItsWarmUpAndNoStepsGiveNulls) {
  RunReport one;
  one.add_step(figures(7, 50.0, 5.0));
  finish(one, 0, kExitOk);
  EXPECT_EQ(number("warmup_steps_excluded"), 0);
  EXPECT_EQ(number("measured_steps"), 1);
  EXPECT_DOUBLE_EQ(number("step_ms", "mean"), 50.0);
  EXPECT_DOUBLE_EQ(number("step_ms", "p99"), 50.0);

  RunReport none;
  const std::string console = finish(none, 0, kExitOk);
  EXPECT_EQ(number("steps"), 0);
  EXPECT_TRUE(json_.at("step_ms").at("mean").is_null());
  EXPECT_TRUE(json_.at("exposed_comm_share").is_null());
  EXPECT_NE(console.find("no training steps"), std::string::npos) << console;
}

// The set-up's seconds: from the report's start (the trainer's) to set_up_done, when the steps
// begin; null where they never began.
TEST_F(ReportTest, SetUpIsTheTimeFromTheStartToTheSteps) {
  const auto start = std::chrono::steady_clock::now() - std::chrono::milliseconds(2500);
  RunReport r(1, start);
  r.set_up_done();
  const auto done = std::chrono::steady_clock::now();
  r.add_step(figures(1, 10.0, 0.0));
  const std::string console = finish(r, 0, kExitOk);
  // The file's numbers have 6 digits (%g): a bound may be exceeded by that rounding.
  const double set_up = number("setup_s"), rounding = 1 + 1e-5;
  EXPECT_GE(set_up * rounding, 2.5);
  EXPECT_LE(set_up, std::chrono::duration<double>(done - start).count() * rounding);
  EXPECT_LE(set_up, number("segment", "wall_time_s") * rounding);
  EXPECT_NE(console.find("tokens seen | set-up 2.5 s | "), std::string::npos) << console;

  RunReport never(1, start);
  const std::string without = finish(never, 0, kExitOk);
  EXPECT_TRUE(json_.at("setup_s").is_null());
  EXPECT_EQ(without.find("set-up"), std::string::npos) << without;
}

TEST_F(ReportTest, UnwritablePathIsAnError) {
  RunReport r;
  EXPECT_THROW(r.finish((dir_ / "missing" / "report.json").string(), 0, 0, stdout), Error);
}

// The run's outcome: the final train loss is the mean of the last loss_window steps, the
// validation's last and best with their steps, the tokens seen; nulls where there are none.
TEST_F(ReportTest, OutcomeFinalLossOverTheWindowValidationAndTokens) {
  RunReport r(3);
  const double losses[] = {5.0, 4.0, 3.0, 2.5, 2.0};
  for (int i = 1; i <= 5; ++i) {
    StepFigures f = figures(i, 10.0, 0.0);
    f.loss = losses[i - 1];
    f.tokens_per_s = 25600.0;  // 256 tokens in 10 ms
    f.tokens_seen = 256u * i;
    r.add_step(f);
  }
  r.add_eval(2, 3.5);
  r.add_eval(4, 2.9);
  r.add_eval(5, 3.1);
  const std::string console = finish(r, 0, kExitOk);
  EXPECT_DOUBLE_EQ(number("final_train_loss", "mean"), (3.0 + 2.5 + 2.0) / 3);
  EXPECT_EQ(number("final_train_loss", "first_step"), 3);
  EXPECT_EQ(number("final_train_loss", "last_step"), 5);
  EXPECT_DOUBLE_EQ(number("val_loss", "last"), 3.1);
  EXPECT_EQ(number("val_loss", "last_step"), 5);
  EXPECT_DOUBLE_EQ(number("val_loss", "best"), 2.9);
  EXPECT_EQ(number("val_loss", "best_step"), 4);
  EXPECT_EQ(number("tokens_seen"), 1280);
  EXPECT_EQ(number("segment", "number"), 1);
  EXPECT_EQ(number("segment", "tokens"), 1280);
  EXPECT_GE(number("segment", "wall_time_s"), 0.0);
  EXPECT_EQ(number("run", "segments"), 1);  // one segment: the run's figures are its own
  EXPECT_EQ(number("run", "tokens"), 1280);
  EXPECT_EQ(number("run", "wall_time_s"), number("segment", "wall_time_s"));
  EXPECT_NE(console.find("final train 2.500000 (mean of steps 3-5) | val last 3.100000 (step 5), "
                         "best 2.900000 (step 4)"),
            std::string::npos)
      << console;
  EXPECT_NE(console.find("1280 tokens seen"), std::string::npos) << console;

  RunReport none;
  finish(none, 0, kExitOk);
  EXPECT_TRUE(json_.at("final_train_loss").at("mean").is_null());
  EXPECT_TRUE(json_.at("val_loss").at("best").is_null());
}

// A run stopped after step 7 and resumed from its checkpoint of step 3 (its record: segment 1,
// steps 1-3, 768 tokens in 30 s): this segment's steps 4-8 in 10 s. The rates are 1280 tokens
// / 10 s and 2048 / 40 s, never the run's tokens over this segment's time (2048 / 10 s).
TEST_F(ReportTest, ResumedRunGivesSegmentAndRunFiguresThatAgree) {
  const auto ten_s_ago = std::chrono::steady_clock::now() - std::chrono::seconds(10);
  RunReport r(1, ten_s_ago);
  r.continues({1, 1, 0, 3, 768, 30.0});
  for (int i = 4; i <= 8; ++i) {
    StepFigures f = figures(i, 10.0, 0.0);
    f.tokens_per_s = 25600.0;  // 256 tokens in 10 ms
    f.tokens_seen = 256u * i;
    r.add_step(f);
  }
  const std::string console = finish(r, 0, kExitOk);
  EXPECT_EQ(number("tokens_seen"), 2048);
  EXPECT_EQ(number("segment", "number"), 2);
  EXPECT_EQ(number("segment", "first_step"), 4);
  EXPECT_EQ(number("segment", "last_step"), 8);
  EXPECT_EQ(number("segment", "tokens"), 1280);
  const double wall = number("segment", "wall_time_s");
  EXPECT_NEAR(wall, 10.0, 1.0);  // measured 1 ms over; 1 s leaves room for a loaded machine
  EXPECT_NEAR(number("segment", "tokens_per_s"), 1280 / wall, 1e-5 * 1280 / wall);  // 6 digits
  EXPECT_EQ(number("run", "segments"), 2);
  EXPECT_EQ(number("run", "first_step"), 1);
  EXPECT_EQ(number("run", "last_step"), 8);
  EXPECT_EQ(number("run", "tokens"), 2048);
  EXPECT_NEAR(number("run", "wall_time_s"), 30.0 + wall, 1e-4 * 40);
  EXPECT_NEAR(number("run", "tokens_per_s"), 2048 / (30.0 + wall), 1e-5 * 2048 / 40);
  EXPECT_NE(console.find("2048 tokens seen | segment 2: steps 4-8, 1.3K tokens in 0:00:10"),
            std::string::npos)
      << console;
  EXPECT_NE(console.find("all 2 segments: steps 1-8, 2.0K tokens in 0:00:40"), std::string::npos)
      << console;
}

// A segment stopped before its first step: no tokens and no rate of its own; the run's figures
// are the earlier segments' and its time.
TEST_F(ReportTest, ResumedSegmentWithoutStepsKeepsTheRunsFigures) {
  RunReport r;
  r.continues({2, 1, 0, 6, 1536, 50.0});
  finish(r, 0, kExitRequeue);
  EXPECT_EQ(number("tokens_seen"), 1536);
  EXPECT_EQ(number("segment", "number"), 3);
  EXPECT_EQ(number("segment", "tokens"), 0);
  EXPECT_TRUE(json_.at("segment").at("tokens_per_s").is_null());
  EXPECT_EQ(number("run", "segments"), 3);
  EXPECT_EQ(number("run", "last_step"), 6);
  EXPECT_EQ(number("run", "tokens"), 1536);
  EXPECT_NEAR(number("run", "tokens_per_s"), 1536 / 50.0, 0.5);  // 50 s and ms: 30.72 - 0.0006
}

// A fresh record begun from another run's checkpoint (5000 tokens seen before it): this run's
// tokens are its steps' only.
TEST_F(ReportTest, RunBegunFromAnotherCheckpointCountsItsOwnTokens) {
  RunReport r;
  for (int i = 11; i <= 12; ++i) {
    StepFigures f = figures(i, 10.0, 0.0);
    f.tokens_per_s = 25600.0;
    f.tokens_seen = 5000u + 256u * (i - 10);
    r.add_step(f);
  }
  finish(r, 0, kExitOk);
  EXPECT_EQ(number("tokens_seen"), 5512);
  EXPECT_EQ(number("segment", "tokens"), 512);
  EXPECT_EQ(number("run", "tokens"), 512);
  EXPECT_EQ(number("run", "first_step"), 11);
}

TEST(ConsoleText, ClockAndCounts) {
  EXPECT_EQ(clock_text(3723.4), "1:02:03");
  EXPECT_EQ(clock_text(59.6), "0:01:00");
  EXPECT_EQ(count_text(1234567), "1.23M");
  EXPECT_EQ(count_text(1536), "1.5K");
  EXPECT_EQ(count_text(12), "12");
  EXPECT_EQ(count_text(2.5e9), "2.50B");
}
