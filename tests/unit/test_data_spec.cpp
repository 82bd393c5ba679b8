// --train-data / --val-data specs on real files: lists, globs, weights, and the errors users meet;
// the datasets they open and the record a checkpoint keeps.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "mpitrain/data/data_spec.hpp"
#include "mpitrain/data/dataset.hpp"
#include "mpitrain/data/token_writer.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

class DataSpecTest : public ::testing::Test {  // shards a_0.bin .. a_2.bin and b.h5 in a temp dir
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpitrain-spec-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    for (int i = 0; i < 3; ++i)
      write_llmc_shard(path("a_" + std::to_string(i) + ".bin"), ids(100 + i, 100 * i));
    write_tokens_hdf5(path("b.h5"), ids(50), 256, "bytes");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::vector<uint32_t> ids(size_t n, uint32_t first = 0) {  // first, first + 1, ... mod 256
    std::vector<uint32_t> v(n);
    std::iota(v.begin(), v.end(), first);
    for (uint32_t& x : v) x %= 256;
    return v;
  }
  // The UsageError's message for parsing `value` ("" if none).
  static std::string error_of(const std::string& value) {
    try {
      parse_data_spec(value, "train-data");
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
};

}  // namespace

TEST_F(DataSpecTest, GlobsExpandSortedAndListsConcatenate) {
  const DataSpec spec = parse_data_spec(path("a_*.bin") + " , " + path("b.h5"), "train-data");
  ASSERT_EQ(spec.entries.size(), 2u);
  EXPECT_FALSE(spec.weighted);
  EXPECT_EQ(spec.entries[0].files,
            (std::vector<std::string>{path("a_0.bin"), path("a_1.bin"), path("a_2.bin")}));
  EXPECT_EQ(spec.entries[1].files, std::vector<std::string>{path("b.h5")});
  EXPECT_EQ(spec.entries[1].weight, 1.0);
  const Dataset data(spec, TokenFormat::Auto, 8, "train-data");
  EXPECT_EQ(data.files().size(), 4u);
  EXPECT_EQ(data.tokens(), 100u + 101 + 102 + 50);
  ASSERT_EQ(data.components(), 1u);
  // Per-file windows, never across files: (n - 1) / 8 each.
  EXPECT_EQ(data.component(0).count(), 12u + 12 + 12 + 6);
  std::vector<int32_t> in(8), tgt(8);
  data.all().read(12, in.data(), tgt.data());  // a_1.bin's first sample
  EXPECT_EQ(in[0], 100);
  EXPECT_EQ(tgt[7], 108);
  data.all().read(41, in.data(), tgt.data());  // b.h5's last: tokens 40 .. 48
  EXPECT_EQ(in[0], 40);
  EXPECT_EQ(tgt[7], 48);
}

TEST_F(DataSpecTest, WeightsAreNormalisedPerEntry) {
  const DataSpec spec = parse_data_spec("3:" + path("a_*.bin") + ",1 : " + path("b.h5"), "x");
  ASSERT_TRUE(spec.weighted);
  EXPECT_DOUBLE_EQ(spec.entries[0].weight, 0.75);
  EXPECT_DOUBLE_EQ(spec.entries[1].weight, 0.25);
  const Dataset data(spec, TokenFormat::Auto, 8, "x");
  ASSERT_EQ(data.components(), 2u);
  EXPECT_EQ(data.component(0).count(), 36u);
  EXPECT_EQ(data.component(1).count(), 6u);
}

TEST_F(DataSpecTest, BadSpecsNameTheEntry) {
  const auto weighted = [&](const char* weight) {  // "<weight>:<dir>/b.h5"
    std::string entry = weight;
    entry += ':';
    entry += path("b.h5");
    return entry;
  };
  const auto has = [](const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
  };
  std::string nothing = "'";
  nothing += path("z_*.bin");
  nothing += "' matches no file";
  EXPECT_TRUE(has(error_of(path("z_*.bin")), nothing));
  std::string two_commas = path("b.h5");
  two_commas += ",,";
  EXPECT_TRUE(has(error_of(two_commas), "empty entry"));
  EXPECT_TRUE(has(error_of(""), "empty entry"));
  std::string mixed = weighted("0.5");
  mixed += ',';
  mixed += path("a_0.bin");
  EXPECT_TRUE(has(error_of(mixed), "1 of 2 entries have a weight"));
  for (const char* bad : {"0", "-1", "nan", "inf"})
    EXPECT_TRUE(has(error_of(weighted(bad)), "not a positive number")) << bad;
  EXPECT_TRUE(has(error_of(weighted("x")), "'x', not a positive number"));
}

TEST_F(DataSpecTest, RecordAndItsDifferences) {
  const std::string record =
      Dataset(parse_data_spec(path("a_*.bin"), "t"), TokenFormat::Auto, 8, "t").record();
  EXPECT_EQ(record, "- 100 " + path("a_0.bin") + "\n- 101 " + path("a_1.bin") + "\n- 102 " +
                        path("a_2.bin") + "\n");
  EXPECT_EQ(data_differences(record, record), "");
  const std::string fewer =
      Dataset(parse_data_spec(path("a_[01].bin"), "t"), TokenFormat::Auto, 8, "t").record();
  EXPECT_EQ(data_differences(record, fewer),
            path("a_2.bin") + ": in the checkpoint, not in this run's data");
  EXPECT_EQ(data_differences(fewer, record), path("a_2.bin") + ": not in the checkpoint");
  write_llmc_shard(path("a_1.bin"), ids(200));
  const std::string grown =
      Dataset(parse_data_spec(path("a_*.bin"), "t"), TokenFormat::Auto, 8, "t").record();
  EXPECT_EQ(data_differences(record, grown),
            path("a_1.bin") + ": 101 tokens in the checkpoint, 200 now");
  const std::string weighted =
      Dataset(parse_data_spec("1:" + path("a_*.bin"), "t"), TokenFormat::Auto, 8, "t").record();
  EXPECT_NE(data_differences(grown, weighted).find("weight - in the checkpoint, 1 now"),
            std::string::npos);
}

TEST_F(DataSpecTest, FilesMustShareTheirDeclaredVocabulary) {
  write_tokens_hdf5(path("c.h5"), ids(50), 300, "bytes");
  try {
    Dataset(parse_data_spec(path("b.h5") + "," + path("c.h5"), "t"), TokenFormat::Auto, 8, "t");
    FAIL() << "no error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("declares vocab_size 300"), std::string::npos);
  }
}
