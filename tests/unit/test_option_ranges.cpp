// The trainer's range table: every numeric option has a row, --help shows it, and each bounded
// end is checked — the value just inside accepted, just outside refused with a message naming the
// option, the value and the range — for flags and config-file values alike.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "mpitrain/app/options.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;

namespace {

// Options whose bounds are tied to another's (min-loss-scale <= initial-loss-scale, exit-at-step
// <= steps): that one at its largest; a GPU backend's option, with the GPU (else refused).
const std::map<std::string, std::vector<std::string>> kCompanions = {
    {"min-loss-scale", {"--initial-loss-scale", "1e18"}},
    {"exit-at-step", {"--steps", "2147483647"}},
#ifdef MPITRAIN_HAVE_CUDA
    {"gpu-workspace-mb", {"--device", "cuda"}},
#endif
};

// "" when parse_options accepts `--name value`, else its UsageError's message.
std::string outcome(const std::string& name, const std::string& value) {
  // (validation data: the evaluation's options are refused without)
  std::vector<std::string> args = {"trainer", "--train-data", "x.h5", "--val-data",
                                   "y.h5",    "--" + name,    value};
  const auto companion = kCompanions.find(name);
  if (companion != kCompanions.end())
    args.insert(args.end(), companion->second.begin(), companion->second.end());
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    parse_options(static_cast<int>(argv.size()), argv.data());
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// Integer options refuse a fraction before any range is checked.
bool integer_option(const std::string& name) {
  return outcome(name, "0.5").find("is invalid") != std::string::npos;
}

std::string text(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A number next to `end` on the side of `direction` (+1 or -1): relatively 1e-6 away (a float
// option's next value), and never below 1e-30 (a float's subnormals, which the parser refuses).
double beside(double end, int direction) {
  return end + direction * std::max(std::fabs(end) * 1e-6, 1e-30);
}

void expect_accepted(const std::string& name, const std::string& value) {
  EXPECT_EQ(outcome(name, value), "") << "--" << name << " " << value;
}

void expect_refused(const OptionRange& r, const std::string& value) {
  const std::string message = outcome(r.name, value);
  EXPECT_NE(message.find(std::string(r.name) + " must be"), std::string::npos)
      << "--" << r.name << " " << value << ": " << message;
  EXPECT_NE(message.find(range_text(r)), std::string::npos) << message;
  EXPECT_NE(message.find("(got "), std::string::npos) << message;
}

}  // namespace

TEST(OptionRanges, EveryNumericOptionHasOne) {
  const char* argv[] = {"trainer", "--train-data", "x.h5"};
  std::istringstream effective(parse_options(3, argv).effective);
  for (std::string line; std::getline(effective, line);) {
    const std::string name = line.substr(0, line.find(" = "));
    const std::string value = line.substr(line.find(" = ") + 3);
    char* end = nullptr;
    std::strtod(value.c_str(), &end);
    // seed: any 64-bit value; micro-batch-size: a positive integer or auto, checked as text.
    if (value.empty() || *end != '\0' || name == "seed" || name == "micro-batch-size") continue;
    EXPECT_NE(range_note(trainer_option_ranges(), name), "") << name << " has no range";
  }
}

TEST(OptionRanges, EachEndIsCheckedJustInsideAndJustOutside) {
  for (const OptionRange& r : trainer_option_ranges()) {
    SCOPED_TRACE(r.name);
#ifndef MPITRAIN_HAVE_CUDA
    if (std::string(r.name) == "gpu-workspace-mb") continue;  // a build without CUDA refuses it
#endif
    if (integer_option(r.name)) {
      ASSERT_FALSE(r.lo_open || r.hi_open) << "integer ranges are closed";
      expect_accepted(r.name, text(r.lo));
      expect_refused(r, text(r.lo - 1));
      if (r.hi == kUnbounded) {
        expect_accepted(r.name, std::to_string(INT_MAX));
      } else {
        expect_accepted(r.name, text(r.hi));
        expect_refused(r, text(r.hi + 1));
      }
      continue;
    }
    expect_accepted(r.name, text(r.lo_open ? beside(r.lo, +1) : r.lo));
    expect_refused(r, text(r.lo_open ? r.lo : beside(r.lo, -1)));
    if (r.hi == kUnbounded) {
      expect_accepted(r.name, text(1e30));
    } else {
      expect_accepted(r.name, text(r.hi_open ? beside(r.hi, -1) : r.hi));
      expect_refused(r, text(r.hi_open ? r.hi : beside(r.hi, +1)));
    }
    expect_refused(r, "inf");
    expect_refused(r, "nan");
  }
}

TEST(OptionRanges, ConfigFileValuesPassTheSameChecks) {
  const fs::path ini =
      fs::temp_directory_path() / ("mpitrain_ranges_" + std::to_string(::getpid()) + ".ini");
  std::ofstream(ini) << "train-data = x.h5\nlr = inf\n";
  const std::string path = ini.string();
  const char* argv[] = {"trainer", "--config", path.c_str()};
  try {
    parse_options(3, argv);
    ADD_FAILURE() << "lr = inf in a config file was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("lr must be in (0, 10] (got inf)"), std::string::npos)
        << e.what();
  }
  fs::remove(ini);
}

TEST(OptionRanges, HelpShowsThem) {
  const char* argv[] = {"trainer", "--help"};
  const std::string help = parse_options(2, argv).print_instead;
  EXPECT_NE(help.find("peak learning rate; range (0, 10] (default: 0.001)"), std::string::npos)
      << help;
  EXPECT_NE(help.find("final lr as a fraction of lr; range [0, 1] (default: 0.1)"),
            std::string::npos);
}

TEST(OptionRanges, TextAndMembership) {
  const OptionRange half_open{"x", 0, 1, false, true};
  EXPECT_EQ(range_text(half_open), "[0, 1)");
  EXPECT_EQ(range_text({"x", 0, kUnbounded, true}), "> 0");
  EXPECT_TRUE(in_range(half_open, 0));
  EXPECT_FALSE(in_range(half_open, 1));
  EXPECT_FALSE(in_range({"x", 0, kUnbounded}, INFINITY));
  EXPECT_FALSE(in_range({"x", -kUnbounded, kUnbounded}, NAN));
}
