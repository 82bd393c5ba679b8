// Sample windows over a token array and the global sample order.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "mpitrain/backend/unscored.hpp"
#include "mpitrain/data/samples.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

class VectorSource final : public TokenSource {  // tokens in memory: token i = 1000 + i
 public:
  explicit VectorSource(uint64_t n) : tokens_(n) {
    std::iota(tokens_.begin(), tokens_.end(), 1000);
  }
  uint64_t size() const override { return tokens_.size(); }
  void read(uint64_t offset, uint64_t count, int32_t* out) const override {
    if (offset + count > tokens_.size()) throw Error("out of range");
    std::copy_n(tokens_.begin() + offset, count, out);
  }
  int64_t vocab_size() const override { return -1; }
  std::string tokenizer() const override { return ""; }
  const std::string& path() const override { return path_; }

 private:
  std::vector<int32_t> tokens_;
  std::string path_ = "mem.h5";
};

// The first `epochs` * n entries of the order, queried in increasing k.
std::vector<uint64_t> stream(const SampleOrder& order, uint64_t epochs) {
  std::vector<uint64_t> out;
  for (uint64_t k = 0; k < epochs * order.n_samples(); ++k) out.push_back(order.at(k));
  return out;
}

}  // namespace

TEST(SampleWindows, CountAndContents) {
  const VectorSource src(41);  // T = 8: windows [0,9), [8,17), ..., [32,41): 5 samples
  const SampleWindows windows(src, 8);
  EXPECT_EQ(windows.count(), 5u);
  EXPECT_EQ(SampleWindows(VectorSource(40), 8).count(), 4u);  // the last token is left over
  std::vector<int32_t> in(8), tgt(8);
  for (uint64_t s = 0; s < windows.count(); ++s) {
    windows.read(s, in.data(), tgt.data());
    for (int t = 0; t < 8; ++t) {
      EXPECT_EQ(in[t], int32_t(1000 + 8 * s + t));
      EXPECT_EQ(tgt[t], int32_t(1000 + 8 * s + t + 1));
    }
  }
  EXPECT_THROW(windows.read(5, in.data(), tgt.data()), Error);
  const SampleWindows t1(src, 1);  // T = 1 edge: every token is an input once
  EXPECT_EQ(t1.count(), 40u);
  t1.read(39, in.data(), tgt.data());
  EXPECT_EQ(in[0], 1039);
  EXPECT_EQ(tgt[0], 1040);
}

// A source with a loss mask: token i is scored where i % 3 != 0.
class MaskedSource final : public TokenSource {
 public:
  explicit MaskedSource(uint64_t n) : tokens_(n) {}
  uint64_t size() const override { return tokens_.size(); }
  void read(uint64_t offset, uint64_t count, int32_t* out) const override {
    tokens_.read(offset, count, out);
  }
  int64_t vocab_size() const override { return -1; }
  std::string tokenizer() const override { return ""; }
  const std::string& path() const override { return tokens_.path(); }
  bool has_loss_mask() const override { return true; }
  void read_loss_mask(uint64_t offset, uint64_t count, uint8_t* out) const override {
    for (uint64_t i = 0; i < count; ++i) out[i] = (offset + i) % 3 != 0;
  }

 private:
  VectorSource tokens_;
};

// The targets whose token the mask marks 0 are kUnscored; the inputs are the tokens still.
TEST(SampleWindows, LossMaskUnscoresItsTargets) {
  const MaskedSource src(41);
  const SampleWindows windows(src, 8);
  std::vector<int32_t> in(8), tgt(8);
  for (uint64_t s = 0; s < windows.count(); ++s) {
    windows.read(s, in.data(), tgt.data());
    for (int t = 0; t < 8; ++t) {
      const uint64_t target = 8 * s + t + 1;  // the target's position in the file
      EXPECT_EQ(in[t], int32_t(1000 + 8 * s + t));
      EXPECT_EQ(tgt[t], target % 3 != 0 ? int32_t(1000 + target) : kUnscored) << s << " " << t;
    }
  }
}

TEST(SampleWindows, TooShortNamesFileCountAndWindow) {
  const VectorSource src(8);
  try {
    SampleWindows windows(src, 8);
    FAIL() << "no exception";
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("mem.h5"), std::string::npos) << msg;
    EXPECT_NE(msg.find("8 tokens"), std::string::npos) << msg;
    EXPECT_NE(msg.find("9"), std::string::npos) << msg;
  }
  EXPECT_EQ(SampleWindows(VectorSource(9), 8).count(), 1u);
}

TEST(SampleOrder, EachEpochIsAPermutation) {
  const uint64_t n = 1000;
  const SampleOrder order(n, 1234, true);
  const auto all = stream(order, 3);
  std::vector<std::vector<uint64_t>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<uint64_t> epoch(all.begin() + e * n, all.begin() + (e + 1) * n);
    std::vector<uint64_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i) << "epoch " << e;
    epochs.push_back(epoch);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<uint64_t> identity(n);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(epochs[0], identity);
}

TEST(SampleOrder, IndependentOfQueryPattern) {
  const uint64_t n = 257;
  const auto in_order = stream(SampleOrder(n, 99, true), 4);
  const SampleOrder random_access(n, 99, true);  // jump between epochs, backwards too
  std::vector<uint64_t> ks(in_order.size());
  std::iota(ks.begin(), ks.end(), 0);
  std::reverse(ks.begin(), ks.end());
  std::rotate(ks.begin(), ks.begin() + 333, ks.end());
  for (uint64_t k : ks) ASSERT_EQ(random_access.at(k), in_order[k]) << "k " << k;
  // A different seed gives a different order; the same seed the same.
  EXPECT_NE(stream(SampleOrder(n, 100, true), 1),
            std::vector<uint64_t>(in_order.begin(), in_order.begin() + n));
  EXPECT_EQ(stream(SampleOrder(n, 99, true), 4), in_order);
}

TEST(SampleOrder, NoShuffleIsSequential) {
  const SampleOrder order(7, 5, false);
  for (uint64_t k = 0; k < 30; ++k) EXPECT_EQ(order.at(k), k % 7);
  EXPECT_EQ(SampleOrder(1, 5, true).at(12), 0u);
  EXPECT_THROW(SampleOrder(0, 5, true), Error);
}

// Every ordering of 4 samples comes out about equally often over seeds: the stored shuffle
// draws from all 24 permutations alike. 24000 seeds: 1000 each, a binomial's sd ~31; allow 200.
TEST(SampleOrder, SeedsDrawEveryPermutationAlike) {
  std::map<std::vector<uint64_t>, int> seen;
  for (uint64_t seed = 0; seed < 24000; ++seed) ++seen[stream(SampleOrder(4, seed, true), 1)];
  ASSERT_EQ(seen.size(), 24u);
  for (const auto& [perm, count] : seen) EXPECT_NEAR(count, 1000, 200);
}

// Above kStoredPermutationMax the computed (Feistel) permutation: each epoch a permutation, the
// next epoch another, and where sample 0 lands spread evenly over seeds (8 ranges, 4000 seeds:
// 500 each, a binomial's sd ~21; allow 100).
TEST(SampleOrder, ComputedPermutationOfALargeSpace) {
  const uint64_t n = SampleOrder::kStoredPermutationMax + 12345;
  const SampleOrder order(n, 3, true);
  std::vector<bool> seen(n);
  uint64_t same_in_next_epoch = 0;
  for (uint64_t k = 0; k < n; ++k) {
    const uint64_t s = order.at(k);
    ASSERT_LT(s, n);
    ASSERT_FALSE(seen[s]) << "sample " << s << " twice in one epoch";
    seen[s] = true;
    same_in_next_epoch += order.at(n + k) == s;
  }
  EXPECT_LT(same_in_next_epoch, 20u);  // a new permutation matches the old in ~1 place
  std::vector<int> ranges(8, 0);
  for (uint64_t seed = 0; seed < 4000; ++seed) ++ranges[SampleOrder(n, seed, true).at(0) * 8 / n];
  for (int r = 0; r < 8; ++r) EXPECT_NEAR(ranges[r], 500, 100) << "range " << r;
}

// No state grows with n: an order over 10^15 samples answers at once, in range, and a run of
// positions gives distinct samples (as a permutation must).
TEST(SampleOrder, HugeSampleCountsNeedNoMemory) {
  const uint64_t n = 1000000000000000ULL;
  const SampleOrder order(n, 7, true);
  std::set<uint64_t> got;
  for (uint64_t k = n - 500; k < n + 500; ++k) {  // across the first epoch boundary
    const uint64_t s = order.at(k);
    ASSERT_LT(s, n);
    if (k < n) got.insert(s);
  }
  EXPECT_EQ(got.size(), 500u);
}
