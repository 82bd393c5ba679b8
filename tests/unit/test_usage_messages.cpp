// What a user reads when asking for help or getting an option wrong: the help formatter, the
// "did you mean" suggester and the layouts that would fit the ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "mpitrain/app/help_format.hpp"
#include "mpitrain/app/suggest.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/train/run_setup.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

std::string grid_error(int world, int dp, int tp, int pp, const LayoutFilter& admits = {}) {
  try {
    resolve_grid(world, dp, tp, pp, admits);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "no UsageError";
}

}  // namespace

TEST(HelpFormat, DefaultsAsAUserWritesThem) {
  EXPECT_EQ(format_value(boost::any(1e-5f)), "1e-05");
  EXPECT_EQ(format_value(boost::any(0.9)), "0.9");
  EXPECT_EQ(format_value(boost::any(0.95)), "0.95");
  EXPECT_EQ(format_value(boost::any(3e-3)), "0.003");
  EXPECT_EQ(format_value(boost::any(65536.0)), "65536");
  EXPECT_EQ(format_value(boost::any(100.0)), "100");
  EXPECT_EQ(format_value(boost::any(10000.0f)), "10000");
  EXPECT_EQ(format_value(boost::any(7)), "7");
  EXPECT_EQ(format_value(boost::any(uint64_t{1337})), "1337");
  EXPECT_EQ(format_value(boost::any(std::string("cosine"))), "cosine");
}

TEST(HelpFormat, OptionsWithPlaceholdersDefaultsAndSwitches) {
  bool off = false, on = true;
  int steps = 100;
  float eps = 1e-5f;
  std::string dir = "runs/x";
  po::options_description d;
  // clang-format off
  d.add_options()
      ("help,h", "print this help")
      ("overwrite", po::value(&off)->default_value(off)->implicit_value(true), "allow it")
      ("shuffle", po::value(&on)->default_value(on)->implicit_value(true), "shuffle")
      ("steps", po::value(&steps)->default_value(steps), "optimizer steps")
      ("norm-eps", po::value(&eps)->default_value(eps), "epsilon")
      ("out-dir", po::value(&dir)->default_value(dir)->value_name("DIR"), "where outputs go");
  // clang-format on
  const std::string help = format_help("intro\n", {{"Things", d}});
  EXPECT_EQ(help.rfind("intro\n\nThings:\n", 0), 0u) << help;
  EXPECT_NE(help.find("\n  -h, --help                  print this help\n"), std::string::npos);
  EXPECT_NE(help.find("\n  --overwrite                 allow it\n"), std::string::npos) << help;
  EXPECT_NE(help.find("--shuffle=false turns it off"), std::string::npos);
  EXPECT_NE(help.find("\n  --steps N                   optimizer steps (default: 100)\n"),
            std::string::npos);
  EXPECT_NE(help.find("\n  --norm-eps X                epsilon (default: 1e-05)\n"),
            std::string::npos);
  EXPECT_NE(help.find("\n  --out-dir DIR               where outputs go (default: runs/x)\n"),
            std::string::npos);
  EXPECT_EQ(help.find("arg"), std::string::npos);
}

TEST(HelpFormat, DescriptionsWrapAtWordsWithinTheWidth) {
  std::string long_text;
  for (int i = 0; i < 40; ++i) long_text += "word" + std::to_string(i) + " tensor-core ";
  int n = 0;
  po::options_description d;
  // clang-format off
  d.add_options()
      ("an-option-with-a-very-long-name", po::value(&n)->default_value(0), "short")
      ("n", po::value(&n)->default_value(0), long_text.c_str());
  // clang-format on
  const std::string help = format_help("", {{"G", d}});
  std::istringstream lines(help);
  std::vector<std::string> words;
  for (std::string line; std::getline(lines, line);) {
    EXPECT_LE(line.size(), kHelpWidth) << line;
    std::istringstream in(line);
    for (std::string w; in >> w;) words.push_back(w);
  }
  std::istringstream expected(long_text);
  size_t found = 0;
  for (std::string w; expected >> w;)
    found += std::find(words.begin(), words.end(), w) != words.end();
  EXPECT_EQ(found, 80u);  // every word whole
  // A name too long to leave the description room puts it on the next line.
  EXPECT_NE(help.find("  --an-option-with-a-very-long-name N\n" + std::string(30, ' ') + "short"),
            std::string::npos)
      << help;
  EXPECT_NE(help.find("(default: 0)"), std::string::npos);  // the default note stays whole
}

TEST(HelpFormat, WrapNeverSplitsAWord) {
  EXPECT_EQ(wrap("aaa bbb ccc", 0, 2, 7), "aaa bbb\n  ccc");
  EXPECT_EQ(wrap("a-very-long-word b", 4, 4, 10), "a-very-long-word\n    b");
}

TEST(Suggest, EditDistanceCountsASwapAsOne) {
  EXPECT_EQ(edit_distance("stpes", "steps"), 1);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("steps", "steps"), 0);
}

TEST(Suggest, NearestKnownNames) {
  po::options_description d;
  for (const char* name : {"steps", "n-layer", "lr", "lr-schedule", "dp", "pp", "tp"})
    d.add_options()(name, "");
  EXPECT_EQ(nearest_options("--stpes", d), std::vector<std::string>{"steps"});
  EXPECT_EQ(nearest_options("--n_layer", d), std::vector<std::string>{"n-layer"});
  EXPECT_EQ(nearest_options("--lr-schedul", d), std::vector<std::string>{"lr-schedule"});
  EXPECT_TRUE(nearest_options("--bogus", d).empty());
  EXPECT_TRUE(nearest_options("--x", d).empty());  // too short to guess from
  EXPECT_EQ(did_you_mean("--stpes", d), " (did you mean --steps?)");
  EXPECT_EQ(did_you_mean("lr-schedul", d), " (did you mean lr-schedule?)");  // an INI name
  EXPECT_EQ(did_you_mean("--dpp", d), " (did you mean --dp or --pp?)");
  EXPECT_EQ(did_you_mean("--bogus", d), "");
}

// Another trainer's name is suggested only as options the tool has (plan, prepare-data: others).
TEST(Suggest, AnotherTrainersNameOnlyWhereTheOptionExists) {
  po::options_description d;
  for (const char* name : {"steps", "lr"}) d.add_options()(name, "");
  EXPECT_EQ(did_you_mean("--learning-rate", d), " (did you mean --lr?)");
  EXPECT_EQ(did_you_mean("MAX_ITERS", d), " (did you mean steps?)");  // an INI name
  EXPECT_EQ(did_you_mean("--batch-size", d), "");  // neither batch option here
  EXPECT_EQ(did_you_mean("--output-dir", d), "");
}

TEST(GridError, NamesRankCountsAndLayoutsThatFit) {
  EXPECT_NE(grid_error(3, 0, 2, 0)
                .find("dp x tp x pp = ? x 2 x 1 does not fit the 3 ranks of "
                      "this job: use -np 2, 4, 6 ... or --tp 1 / --tp 3"),
            std::string::npos);
  EXPECT_NE(grid_error(2, 3, 0, 0).find("use -np 3, 6, 9 ... or --dp 1 / --dp 2"),
            std::string::npos);
  EXPECT_NE(grid_error(8, 2, 2, 3).find("use -np 12 or --pp 2"), std::string::npos);
  const std::string none = grid_error(3, 2, 2, 0);  // no single change fits 3 ranks
  EXPECT_NE(none.find("use -np 4, 8, 12 ..."), std::string::npos) << none;
  EXPECT_EQ(none.find(" or "), std::string::npos) << none;
  EXPECT_NE(grid_error(720, 0, 7, 0)
                .find("--tp 1 / --tp 2 / --tp 3 / --tp 4 / --tp 5 / --tp 6 "
                      "/ ..."),
            std::string::npos);
}

// -np 3 --tp 2 on a 4-head, 2-layer model: --tp 3 fits the ranks but not the heads; only what
// the model admits is named (the same model, through the trainer: tests/e2e/plan.sh).
TEST(GridError, NamesOnlyLayoutsTheModelAdmits) {
  ModelConfig m;
  m.n_layer = 2, m.n_head = m.n_kv_head = 4, m.d_model = 64, m.d_ff = 256, m.vocab_size = 256;
  Options o;
  o.model = m;
  const std::string tp = grid_error(3, 0, 2, 0, layouts_the_model_admits(o));
  EXPECT_NE(tp.find("use -np 2, 4, 6 ... or --tp 1"), std::string::npos) << tp;
  EXPECT_EQ(tp.find("--tp 3"), std::string::npos) << tp;
  const std::string pp = grid_error(4, 0, 0, 3, layouts_the_model_admits(o));  // 2 layers
  EXPECT_NE(pp.find("or --pp 1 / --pp 2"), std::string::npos) << pp;
  EXPECT_EQ(pp.find("--pp 4"), std::string::npos) << pp;
  o.train.init_from = "model.bin";  // the model is in the file: nothing filtered
  EXPECT_NE(grid_error(3, 0, 2, 0, layouts_the_model_admits(o)).find("--tp 1 / --tp 3"),
            std::string::npos);
}
