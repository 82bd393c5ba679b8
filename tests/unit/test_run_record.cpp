// run.ini: the options with the resolved values put in, never overwrite = true; floats in the
// shortest text that reads back (io/shortest_text.hpp, which every file of a user's float uses).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/train/run_record.hpp"

namespace mpitrain {
namespace {

TEST(RunRecord, FloatsAreWrittenAsTheShortestTextThatReadsBack) {
  EXPECT_EQ(shortest_text(1e-5f), "1e-05");
  EXPECT_EQ(shortest_text(0.95f), "0.95");
  EXPECT_EQ(shortest_text(10000.0f), "10000");
  EXPECT_EQ(shortest_text(3e-3f), "0.003");
  for (float x : {0.1f, 1.0f / 3.0f, 6.02e23f, 1.17549435e-38f, 123456.789f})
    EXPECT_EQ(std::strtof(shortest_text(x).c_str(), nullptr), x) << shortest_text(x);
}

TEST(RunRecord, ResolvedValuesReplaceTheOptionsAndOverwriteIsNeverKept) {
  const std::string effective =
      "allow-seed-change = true\ndp = 0\nlr = 0.003\noverwrite = true\nresume = auto\n"
      "threads = 0\nvocab-size = 0\n";
  const std::string ini = resolved_ini(
      effective, {{"dp", "2"}, {"threads", "4"}, {"vocab-size", "256"}, {"d-ff", "512"}});
  EXPECT_EQ(ini,
            "allow-seed-change = false\ndp = 2\nlr = 0.003\noverwrite = false\nresume = \n"
            "threads = 4\nvocab-size = 256\nd-ff = 512\n");
}

}  // namespace
}  // namespace mpitrain
