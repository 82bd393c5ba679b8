// What carries a run's tensors: --comm against the device and shared GPUs, and the staging sizes
// of each group's largest call, counted by hand for a small gpt2.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/comm_groups.hpp"
#include "small_llama.hpp"

using namespace mpitrain;

TEST(ResolveComm, CpuTakesAutoOrMpi) {
  EXPECT_EQ(resolve_comm("auto", "cpu", false), CommKind::Mpi);
  EXPECT_EQ(resolve_comm("mpi", "cpu", false), CommKind::Mpi);
  EXPECT_THROW(resolve_comm("nccl", "cpu", false), UsageError);
}

TEST(ResolveComm, SharedGpusGoOverMpi) {
  EXPECT_EQ(resolve_comm("auto", "cuda", true), CommKind::Mpi);
  EXPECT_EQ(resolve_comm("mpi", "cuda", true), CommKind::Mpi);
  EXPECT_EQ(resolve_comm("mpi", "cuda", false), CommKind::Mpi);
  try {
    resolve_comm("nccl", "cuda", true);
    FAIL() << "nccl on shared GPUs was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("NCCL needs a GPU per rank"), std::string::npos);
  }
}

TEST(ResolveComm, OwnGpusGoOverNccl) {
#ifdef MPITRAIN_HAVE_NCCL
  EXPECT_EQ(resolve_comm("auto", "cuda", false), CommKind::Nccl);
  EXPECT_EQ(resolve_comm("nccl", "cuda", false), CommKind::Nccl);
#else
  EXPECT_THROW(resolve_comm("auto", "cuda", false), UsageError);  // no NCCL in this build
#endif
}

TEST(DataCallSizes, SmallGpt2) {
  ModelConfig c;  // L2 H4 C64 F256, vocabulary 256 (padded to 256), 32 positions
  c.arch = Arch::Gpt2;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.d_model = 64;
  c.d_ff = 256;
  c.vocab_size = 256;
  c.max_seq_len = 32;
  const int B = 2, T = 16, slots = 3;
  // Last stage of tp 2: local wte 128 x 64; replicated: wpe is not here (first stage), the
  // largest replicated tensor is a 64-vector; B T C = 2048 floats.
  ModelShard last{2, 1, 1, 2, false, true};
  DataCallSizes s = data_call_sizes(c, last, B, T, slots, 1.0);
  EXPECT_EQ(s.tp, 4u * 2048);
  EXPECT_EQ(s.pp, 4u * 2048);
  EXPECT_EQ(s.pp_started, std::vector<size_t>(7, 4u * 2048));
  EXPECT_EQ(s.embedding, 4u * 128 * 64);
  const size_t total = ParamLayout(c, last).total();
  EXPECT_EQ(s.dp, 4 * total);  // a 1 MiB bucket holds the whole stage
  EXPECT_EQ(s.dp_started, std::vector<size_t>(1, 4 * total));
  // The ring's block: B T rows of 2 kv heads of the 4 (tp 2), head size 16, in fp32.
  EXPECT_EQ(s.cp, 4u * 2 * 16 * 2 * 2 * 16);
  EXPECT_EQ(s.cp_started, std::vector<size_t>(4, s.cp));
  // First stage, no tp: wpe (32 x 64 = 2048) is replicated too; 8 KiB buckets of 2048 floats.
  ModelShard first{1, 0, 0, 1, true, false};
  s = data_call_sizes(c, first, 1, 8, slots, 8.0 / 1024);
  EXPECT_EQ(s.tp, 4u * 2048);  // wpe beats B T C = 512 and 2 B T = 16
  EXPECT_EQ(s.dp, 4u * 2048);
  const size_t first_total = ParamLayout(c, first).total();
  EXPECT_EQ(s.dp_started.size(), (first_total + 2047) / 2048);
  EXPECT_EQ(s.embedding, 4u * 256 * 64);  // the whole wte: no tp here
}

// Llama's first stage holds wte and its last lm_head: nothing tied crosses the embedding group,
// so neither end makes a data communicator for it (an NCCL one needs every member).
TEST(DataCallSizes, UntiedLlamaHasNoEmbeddingTraffic) {
  const ModelConfig c = test_models::small_llama(64, 192, 256, 32);
  for (const ModelShard& stage : {ModelShard{1, 0, 0, 1, true, false},
                                  ModelShard{1, 0, 1, 2, false, true}})
    EXPECT_EQ(data_call_sizes(c, stage, 2, 16, 2, 1.0).embedding, 0u);
}

// Expert parallelism (ep 2 of a 4-expert llama): the ep group's row exchange is one started call
// of the sent and received rows (B T top-k rows of C floats, ep + 1 times); the gradient calls
// are the buckets cut at the expert ranges, dense ones over dp, expert ones over expert-dp,
// together the whole stage; under ZeRO-2/3 each unit's calls one per segment: every stage as
// often as a unit has segments of the group.
TEST(DataCallSizes, ExpertParallelCallsOfEachGroup) {
  ModelConfig c = test_models::small_llama(64, 128, 256, 32);
  c.n_experts = 4;
  c.top_k = 2;
  const int B = 2, T = 16;
  ModelShard shard;
  shard.ep = 2;
  const ParamLayout layout(c, shard);
  const std::vector<FlatRange> experts = expert_ranges(layout);
  ASSERT_EQ(experts.size(), 4u);  // fc and proj of the 2 MoE layers

  const double bucket_mb = 4096.0 * 4 / (1 << 20);  // buckets of 4096 floats
  const DataCallSizes z0 = data_call_sizes(c, shard, B, T, 1, bucket_mb);
  EXPECT_EQ(z0.ep_started, std::vector<size_t>{3u * B * T * 2 * 64 * 4});
  size_t dense = 0, expert = 0;
  for (size_t b : z0.dp_started) dense += b;
  for (size_t b : z0.expert_dp_started) expert += b;
  size_t expert_floats = 0;
  for (const FlatRange& r : experts) expert_floats += r.size();
  EXPECT_EQ(expert, 4 * expert_floats);
  EXPECT_EQ(dense + expert, 4 * layout.total());
  EXPECT_EQ(z0.dp_started.size() + z0.expert_dp_started.size(),
            gradient_buckets(layout.total(), 4096, experts).size());
  EXPECT_GT(z0.dp_started.size(), (4 * layout.total() - expert) / (4 * 4096))
      << "the dense calls cut at the expert ranges are more than the plain buckets";
  EXPECT_EQ(z0.expert_dp, *std::max_element(z0.expert_dp_started.begin(),
                                            z0.expert_dp_started.end()));

  const std::vector<size_t> stages = sharded_call_stages(layout, {3});
  const DataCallSizes z3 = data_call_sizes(c, shard, B, T, 1, bucket_mb, {3});
  size_t most_dense = 0, most_expert = 0;
  for (const FlatRange& unit : layout.units()) {
    size_t d = 0, e = 0;
    for (const GroupSpan& g : cut_at_experts(unit, experts)) ++(g.expert ? e : d);
    most_dense = std::max(most_dense, d);
    most_expert = std::max(most_expert, e);
  }
  EXPECT_EQ(most_expert, 2u);
  EXPECT_EQ(z3.dp_started.size(), stages.size() * most_dense);
  EXPECT_EQ(z3.expert_dp_started.size(), stages.size() * most_expert);
  EXPECT_EQ(z3.expert_dp, z3.dp);
}
