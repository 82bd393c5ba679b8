// ranks: 2 4
// The numeric guards over real ranks: every rank agrees on the first non-finite gradient (lowest
// global tensor index, then lowest rank) and on a non-finite loss anywhere; replica checksums find
// a one-ulp difference between data-parallel copies, name the ranks and the tensor, and every
// rank learns of it, also when only one of several data-parallel groups differs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/train/numeric_guard.hpp"
#include "mpitrain/train/replica_check.hpp"

using namespace mpitrain;

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

ModelConfig small_config() {
  ModelConfig c;
  c.n_layer = 4;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.d_model = 8;
  c.d_ff = 16;
  c.vocab_size = 16;
  c.max_seq_len = 4;
  return c;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(FindNonFinite, EveryRankAgreesOnTheFirstInTheModelsOrder) {
  MpiCommunicator world(MPI_COMM_WORLD, "world");
  const int r = world.rank(), n = world.size();
  const ParamLayout layout(small_config());
  const std::vector<ParamTensor>& tensors = layout.tensors();
  std::vector<float> grads(layout.total(), 0.0f);
  // Rank r poisons tensor (last - r): the highest rank holds the earliest; rank n-2 holds it too.
  const ParamTensor& mine = tensors[tensors.size() - 1 - r];
  grads[mine.offset] = kNaN;
  const ParamTensor& first = tensors[tensors.size() - n];
  if (r == n - 2) grads[first.offset + 1] = kNaN;
  const NonFinite found = find_nonfinite(layout, grads.data(), r == 0 ? kNaN : 1.0, world);
  EXPECT_TRUE(found.found);
  EXPECT_TRUE(found.loss);  // rank 0's loss
  EXPECT_EQ(found.tensor, first.name);
  EXPECT_EQ(found.global_index, first.global_index);
  EXPECT_EQ(found.rank, n - 2);  // the lower of the two ranks that hold it
  EXPECT_EQ(found.stats.nan, 1u);
  EXPECT_EQ(found.stats.count, first.numel);

  std::vector<float> clean(layout.total(), 0.0f);
  EXPECT_FALSE(find_nonfinite(layout, clean.data(), 1.0, world).found);
}

TEST(ReplicasAgree, AOneUlpDifferenceIsFoundAndNamed) {
  MpiCommunicator world(MPI_COMM_WORLD, "world");
  const int r = world.rank(), n = world.size();
  const ParamLayout layout(small_config());
  std::vector<float> params(layout.total());
  for (size_t i = 0; i < params.size(); ++i) params[i] = 0.01f * static_cast<float>(i % 97);
  EXPECT_TRUE(replicas_agree(layout, params.data(), world, world, 5));

  const ParamTensor& t = layout.find("h.2.mlp.fc.weight");
  if (r == n - 1) params[t.offset + 3] = std::nextafter(params[t.offset + 3], 1.0f);
  if (r == 0) ::testing::internal::CaptureStderr();
  EXPECT_FALSE(replicas_agree(layout, params.data(), world, world, 5));
  if (r != 0) return;
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(
      contains(text, "step 5: replica drift: the data-parallel copies of h.2.mlp.fc.weight"))
      << text;
  std::vector<int> same(n - 1);
  for (int q = 0; q < n - 1; ++q) same[q] = q;
  EXPECT_TRUE(contains(text, "version 1 on world rank(s) " + rank_ranges(same) + ":")) << text;
  EXPECT_TRUE(contains(text, "version 2 on world rank(s) " + std::to_string(n - 1))) << text;
  EXPECT_TRUE(contains(text, "differs from rank 0's copy in 1 element(s), first at index 3"))
      << text;
}

TEST(ReplicasAgree, EveryRankLearnsOfADifferenceInAnotherGroup) {
  MpiCommunicator world(MPI_COMM_WORLD, "world");
  const int r = world.rank(), n = world.size();
  if (n < 4) GTEST_SKIP() << "needs two data-parallel groups of two";
  // Two groups {0, 2} and {1, 3} (as dp groups under tp = 2); only the second one differs.
  const MpiComm group = MpiComm::world().split(r % 2, r);
  MpiCommunicator dp(group.get(), "dp");
  const ParamLayout layout(small_config());
  std::vector<float> params(layout.total(), 0.5f + static_cast<float>(r % 2));
  if (r == 3) params[layout.find("lnf.weight").offset] = 0.0f;
  if (r == 0) ::testing::internal::CaptureStderr();
  EXPECT_FALSE(replicas_agree(layout, params.data(), dp, world, 2));
  if (r != 0) return;
  const std::string text = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(text, "copies of lnf.weight")) << text;
  EXPECT_TRUE(contains(text, "on world rank(s) 1:")) << text;
  EXPECT_TRUE(contains(text, "on world rank(s) 3:")) << text;
}
