// Options: defaults, INI file with flags overriding it, and one clear UsageError for bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "mpitrain/app/options.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "trainer");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

std::string usage_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Options, DefaultsAndFlags) {
  Options o = parse({"--train-data", "x.h5", "--steps", "7", "--arch", "llama", "--overwrite"});
  EXPECT_EQ(o.train.steps, 7);
  EXPECT_EQ(o.model.arch, Arch::Llama);
  EXPECT_TRUE(o.train.overwrite);
  EXPECT_TRUE(o.train.shuffle);
  EXPECT_EQ(o.model.vocab_size, 0);  // resolved later from the data
  EXPECT_EQ(o.model_set, std::vector<std::string>{"arch"});
  EXPECT_NE(o.effective.find("steps = 7"), std::string::npos);
}

TEST(Options, TheLastOfARepeatedFlagWins) {
  Options o = parse({"--train-data", "x.h5", "--steps", "7", "--lr", "0.1", "--steps", "9"});
  EXPECT_EQ(o.train.steps, 9);
  EXPECT_DOUBLE_EQ(o.train.lr, 0.1);
}

TEST(Options, FlagsOverrideTheIniFile) {
  const std::string path = testing::TempDir() + "/options_test.ini";
  {
    std::ofstream f(path);
    f << "# comment\nsteps = 11\nlr = 0.5\nn-layer = 3\nshuffle = false\ntrain-data = a.h5\n";
  }
  Options o = parse({"--config", path, "--lr", "0.25"});
  EXPECT_EQ(o.train.steps, 11);
  EXPECT_DOUBLE_EQ(o.train.lr, 0.25);
  EXPECT_EQ(o.model.n_layer, 3);
  EXPECT_FALSE(o.train.shuffle);
  EXPECT_EQ(o.train.train_data, "a.h5");
  std::remove(path.c_str());
}

TEST(Options, HelpListsEveryOptionWithDefault) {
  Options o = parse({"--help"});
  ASSERT_TRUE(o.help);
  for (const char* name : {"--config", "--out-dir", "--steps", "--global-batch-size",
                           "--micro-batch-size", "--seq-len", "--lr", "--lr-schedule",
                           "--warmup-steps", "--weight-decay", "--grad-clip", "--seed", "--shuffle",
                           "--train-data", "--val-data", "--init-from", "--eval-interval",
                           "--threads", "--overwrite", "--arch", "--n-layer", "--n-head",
                           "--n-kv-head", "--d-model", "--d-ff", "--vocab-size"})
    EXPECT_NE(o.help_text.find(name), std::string::npos) << name;
  EXPECT_NE(o.help_text.find("(=100)"), std::string::npos);  // defaults are shown
}

TEST(Options, BadInputIsOneClearUsageError) {
  EXPECT_NE(usage_error({"--train-data", "x", "--steps", "abc"}).find("steps"), std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--no-such-option", "1"}).find("no-such-option"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--steps", "-1"}).find("steps must not be negative"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--arch", "bert"}).find("arch"), std::string::npos);
  EXPECT_NE(usage_error({}).find("train-data"), std::string::npos);
  EXPECT_NE(usage_error({"--config", "/nonexistent/run.ini"}).find("/nonexistent/run.ini"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--data-format", "csv"}).find("data-format"),
            std::string::npos);
}

TEST(ModelConfig, ValidateNamesTheInconsistency) {
  ModelConfig c;
  c.d_model = 130;
  c.n_head = 4;
  try {
    c.validate();
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("d-model (130)"), std::string::npos);
  }
  c.d_model = 128;
  c.n_kv_head = 3;
  EXPECT_THROW(c.validate(), UsageError);
}
