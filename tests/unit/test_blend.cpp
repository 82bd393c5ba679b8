// The blend's global order: weights met, independent of ranks and micro-batches, resumable; and
// the prefetcher giving exactly the loader's batches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "mpitrain/data/blend.hpp"
#include "mpitrain/data/sample_stream.hpp"
#include "mpitrain/data/token_writer.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/batch_loader.hpp"
#include "mpitrain/train/batch_prefetch.hpp"

using namespace mpitrain;

namespace {

constexpr int kSeqLen = 4;

class BlendTest : public ::testing::Test {  // three token files of distinct ids in a temp dir
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mpitrain-blend-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    write_llmc_shard(path("web_0.bin"), ids(0, 41));                   // 10 samples
    write_nanogpt_bin(path("web_1.bin"), ids(1000, 21));               // 5
    write_tokens_hdf5(path("code.h5"), ids(2000, 29), 4096, "bytes");  // 7
    spec_ = "0.6:" + path("web_*.bin") + ", 0.4:" + path("code.h5");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::vector<uint32_t> ids(uint32_t first, size_t n) {
    std::vector<uint32_t> v(n);
    std::iota(v.begin(), v.end(), first);
    return v;
  }
  // The first input token of each of global samples 0 .. steps*batch-1, as dp ranks each loading
  // their micro-batches would see them (concatenated in global order).
  std::vector<int32_t> run(int dp, int micro, int steps, int batch, uint64_t start = 0) {
    const Dataset data(parse_data_spec(spec_, "t"), TokenFormat::Auto, kSeqLen, "t");
    std::vector<int32_t> firsts(static_cast<size_t>(steps) * batch);
    for (int r = 0; r < dp; ++r) {
      SampleStream stream(data, 7, true);
      BatchLoader loader(stream, kSeqLen, batch, micro, r, dp);
      std::vector<int32_t> tok(micro * kSeqLen), tgt(tok.size());
      for (int s = 0; s < steps; ++s)
        for (int m = 0; m < loader.micro_batches(); ++m) {
          loader.load(start + static_cast<uint64_t>(s) * batch, m, tok.data(), tgt.data());
          for (int i = 0; i < micro; ++i)
            firsts[s * batch + r * (batch / dp) + m * micro + i] = tok[i * kSeqLen];
        }
    }
    return firsts;
  }
  std::filesystem::path dir_;
  std::string spec_;
};

}  // namespace

TEST(BlendOrder, EveryPrefixMeetsTheWeightsWithinOneSample) {
  const std::vector<double> w = {0.5, 0.3, 0.15, 0.05};
  BlendOrder order(w);
  std::vector<uint64_t> counts(w.size(), 0);
  for (uint64_t k = 0; k < 10000; ++k) {
    const BlendPick p = order.at(k);
    EXPECT_EQ(p.index, counts[p.component]);  // each component's stream is taken in order
    ++counts[p.component];
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_LT(std::abs(static_cast<double>(counts[i]) - w[i] * (k + 1)), 1.0)
          << "component " << i << " after " << k + 1 << " samples";
  }
}

TEST(BlendOrder, AnyQueryOrderGivesTheSamePicks) {
  BlendOrder forward({0.7, 0.3}), jumping({0.7, 0.3});
  std::vector<BlendPick> picks;
  for (uint64_t k = 0; k < 200; ++k) picks.push_back(forward.at(k));
  for (uint64_t k : {150u, 3u, 199u, 0u, 77u, 78u}) {
    EXPECT_EQ(jumping.at(k).component, picks[k].component) << k;
    EXPECT_EQ(jumping.at(k).index, picks[k].index) << k;
  }
}

TEST_F(BlendTest, SameSamplesForAnyRankCountAndMicroBatch) {
  const std::vector<int32_t> one = run(1, 12, 5, 12);
  EXPECT_EQ(run(2, 3, 5, 12), one);
  EXPECT_EQ(run(4, 1, 5, 12), one);
  EXPECT_EQ(run(3, 2, 5, 12), one);
  // The weights over the 60 samples (both components wrapped into new epochs): 36 web, 24 code.
  int code = 0;
  for (int32_t t : one) code += t >= 2000;
  EXPECT_EQ(code, 24);
}

TEST_F(BlendTest, ResumeContinuesTheSequence) {
  const std::vector<int32_t> whole = run(1, 4, 6, 8);
  const std::vector<int32_t> tail = run(2, 2, 3, 8, 24);  // a fresh process at consumed = 24
  EXPECT_EQ(std::vector<int32_t>(whole.begin() + 24, whole.end()), tail);
}

TEST_F(BlendTest, PrefetchGivesTheLoadersBatchesInAnyRequestOrder) {
  const Dataset data(parse_data_spec(spec_, "t"), TokenFormat::Auto, kSeqLen, "t");
  std::string blocker;
  ASSERT_TRUE(data.concurrent_reads(&blocker));  // the HDF5 file is mapped too
  SampleStream direct_stream(data, 7, true), ahead_stream(data, 7, true);
  BatchLoader direct(direct_stream, kSeqLen, 8, 2, 1, 2), ahead(ahead_stream, kSeqLen, 8, 2, 1, 2);
  BatchPrefetcher prefetch(ahead, 3);
  std::vector<int32_t> a(8), b(8), ta(8), tb(8);
  // In step order, then a jump back (a resume) and forward again.
  const std::vector<std::pair<uint64_t, int>> requests = {
      {0, 0}, {0, 1}, {8, 0}, {8, 1}, {16, 0}, {16, 1}, {8, 0}, {8, 1}, {40, 1}, {48, 0}};
  for (const auto& [consumed, micro] : requests) {
    direct.load(consumed, micro, a.data(), ta.data());
    prefetch.load(consumed, micro, b.data(), tb.data());
    EXPECT_EQ(a, b) << consumed << " " << micro;
    EXPECT_EQ(ta, tb) << consumed << " " << micro;
  }
}
