// ranks: 2 4
// ShardedUnits (ZeRO-2/3) against a plain Model with whole buffers, over the real dp group: the
// sharded gradients are the rank's pieces of the all-reduced whole gradients, the gathered
// parameters give the plain model's losses (prefetch and resharding on and off), and an update
// of the owned parameters reaches every rank's next forward; hybrid sharding (shard groups of 2
// inside dp 4) gives the same gradients; so do expert ranges over an expert-dp group.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/train/sharded_units.hpp"

using namespace mpitrain;

namespace {

constexpr int kBatch = 2, kSeq = 8;
constexpr uint64_t kSeed = 5;

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = 3;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::Llama ? 2 : 4;
  c.d_model = 16;
  c.d_ff = 24;
  c.vocab_size = 40;
  c.max_seq_len = kSeq;
  return c;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

// Micro-batch m of data-parallel rank r: different on every rank.
Batch batch_of(int r, int m, int vocab) {
  Batch b{std::vector<int32_t>(kBatch * kSeq), std::vector<int32_t>(kBatch * kSeq)};
  for (int i = 0; i < kBatch * kSeq; ++i) {
    b.tokens[i] = (i * 7 + r * 13 + m * 5) % vocab;
    b.targets[i] = (i * 3 + r * 11 + m * 17 + 1) % vocab;
  }
  return b;
}

// The update every test applies: a function of the flat index and the old value.
float updated(size_t i, float old) { return 0.75f * old + 0.001f * static_cast<float>(i % 11); }

struct Case {
  Arch arch = Arch::Gpt2;
  int level = 3;
  ShardingOptions sharding;
  Precision storage = Precision::Fp32;
  int micro_batches = 1;
  ModelShard stage;  // the whole model, or one pipeline stage of it
};

// A stage boundary's values (its input, or its output's gradient) for rank r's micro-batch m.
std::vector<float> boundary(size_t n, int r, int m, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = scale * (static_cast<float>((i * 37 + r * 11 + m * 3) % 101) / 101.0f - 0.5f);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::string name(const Case& s) {
  return std::string(s.arch == Arch::Gpt2 ? "gpt2" : "llama") + " ZeRO-" + std::to_string(s.level) +
         (s.sharding.prefetch ? " prefetch" : " no-prefetch") +
         (s.sharding.reshard_after_forward ? " reshard" : " keep") +
         (s.storage == Precision::Fp32 ? " fp32" : " bf16") + " x" +
         std::to_string(s.micro_batches) + " layers [" + std::to_string(s.stage.layer_begin) +
         ", " + std::to_string(s.stage.layer_end) + ")";
}

// A plain model and a sharded one of the same initial values, stepped side by side.
class Pair {
 public:
  // shard: the group the units are split over; replicas: HSDP's (null: none); dp: the whole
  // data-parallel group the plain model's gradients are all-reduced over.
  Pair(const Case& s, MpiCommunicator& shard, MpiCommunicator* replicas, const MpiComm& dp)
      : s_(s), cfg_(tiny(s.arch)), dp_(dp), backend_(1) {
    const ModelOptions plain_options{s.storage, Recompute::None, s.storage};
    ModelOptions lent = plain_options;
    lent.lend_grads = true;
    lent.lend_params = s.level == 3;
    plain_ = std::make_unique<Model<float>>(cfg_, backend_, s.stage, kBatch, kSeq, 1, nullptr,
                                            plain_options);
    lent_ = std::make_unique<Model<float>>(cfg_, backend_, s.stage, kBatch, kSeq, 1, nullptr, lent);
    sharded_ =
        std::make_unique<ShardedUnits>(backend_, lent_->layout(), shard, replicas, s.storage,
                                       s.sharding, s.level == 2 ? lent_->params() : Buf<float>());
    lent_->set_lender(sharded_.get());
    plain_->init(kSeed);
    if (s.level == 2) {
      lent_->init(kSeed);  // the owned pieces lie in the whole copy (or a compact copy of it)
      sharded_->take_params();
    } else {
      initial_tensors<float>(
          cfg_, lent_->layout(), kSeed,
          [&](const ParamTensor& t, const float* v) { sharded_->set_tensor(t, v); });
    }
  }

  ShardedUnits& sharded() { return *sharded_; }
  Model<float>& lent() { return *lent_; }
  Backend<float>& backend() { return backend_; }

  // One step's forwards and backwards on both; returns the losses (plain, sharded) per
  // micro-batch (0 on a stage before the last). A stage's outputs and input gradients must be the
  // same bits. The plain gradients are then all-reduced over dp.
  std::vector<std::pair<double, double>> step() {
    std::vector<std::pair<double, double>> losses;
    const float dloss = 1.0f / (kBatch * kSeq);
    plain_->zero_grads();
    sharded_->zero_grads();
    for (int m = 0; m < s_.micro_batches; ++m) {
      const Batch b = batch_of(dp_.rank(), m, cfg_.vocab_size);
      const size_t nc = static_cast<size_t>(kBatch) * kSeq * cfg_.d_model;
      if (!s_.stage.first_stage) {
        const std::vector<float> x = boundary(nc, dp_.rank(), m, 1.0f);
        backend_.upload(plain_->input(0), x.data(), nc);
        backend_.upload(lent_->input(0), x.data(), nc);
      }
      const double p = plain_->forward(0, b.tokens.data(), b.targets.data(), kBatch, kSeq, dloss);
      const double l = lent_->forward(0, b.tokens.data(), b.targets.data(), kBatch, kSeq, dloss);
      losses.emplace_back(p, l);
      if (!s_.stage.last_stage) {
        EXPECT_TRUE(
            same_bits(boundary_of(plain_->output(0), nc), boundary_of(lent_->output(0), nc)));
        const std::vector<float> dy = boundary(nc, dp_.rank(), m, 0.01f);
        backend_.upload(plain_->output_grad(), dy.data(), nc);
        backend_.upload(lent_->output_grad(), dy.data(), nc);
      }
      plain_->backward(0, b.tokens.data(), kBatch, kSeq);
      lent_->backward(0, b.tokens.data(), kBatch, kSeq);
      if (!s_.stage.first_stage) {
        EXPECT_TRUE(
            same_bits(boundary_of(plain_->input_grad(), nc), boundary_of(lent_->input_grad(), nc)));
      }
    }
    sharded_->finish();
    // Expert ranges: summed over expert-dp only (from the local gradients), the rest over dp.
    const std::vector<float> local(plain_->grads(), plain_->grads() + plain_->num_params());
    EXPECT_EQ(MPI_Allreduce(MPI_IN_PLACE, plain_->grads(), static_cast<int>(plain_->num_params()),
                            MPI_FLOAT, MPI_SUM, dp_.get()),
              MPI_SUCCESS);
    for (const FlatRange& e : s_.sharding.expert_ranges) {
      std::vector<float> sum(local.begin() + e.lo, local.begin() + e.hi);
      s_.sharding.expert_dp->all_reduce(sum.data(), sum.size(), ReduceOp::Sum);
      std::copy(sum.begin(), sum.end(), plain_->grads() + e.lo);
    }
    return losses;
  }

  // max |sharded - plain piece| / max |plain| over every rank's owned pieces (0: bit for bit).
  // Collective: a ZeRO-2 rank's contiguous range may hold only zero gradients (padded vocab rows).
  double grad_error() {
    const ShardRanges& owned = sharded_->owned();
    const float* mine = sharded_->owned_grads();
    double diff = 0, scale = 0;
    size_t checked = 0;
    for (size_t i = 0; i < owned.ranges().size(); ++i)
      for (size_t k = owned.ranges()[i].lo; k < owned.ranges()[i].hi; ++k, ++checked) {
        const float whole = plain_->grads()[k],
                    piece = mine[owned.at(i) + k - owned.ranges()[i].lo];
        if (std::memcmp(&whole, &piece, sizeof(float)) != 0)
          diff = std::max(diff, std::abs(static_cast<double>(whole) - piece));
        scale = std::max(scale, std::abs(static_cast<double>(whole)));
      }
    EXPECT_EQ(checked, owned.size());
    double worst[2] = {diff, scale};
    MPI_Allreduce(MPI_IN_PLACE, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    EXPECT_GT(worst[1], 0.0);
    return worst[0] / worst[1];
  }

  // The whole parameters of the plain model, host fp32.
  std::vector<float> plain_params() {
    std::vector<float> p(plain_->num_params());
    backend_.download(p.data(), plain_->params(), p.size());
    return p;
  }

  // updated() applied to the plain model's whole parameters and to the sharded owned ones,
  // then params_updated().
  void update() {
    std::vector<float> whole = plain_params();
    for (size_t i = 0; i < whole.size(); ++i) whole[i] = updated(i, whole[i]);
    backend_.upload(plain_->params(), whole.data(), whole.size());
    const ShardRanges& owned = sharded_->owned();
    std::vector<float> mine(owned.size());
    backend_.download(mine.data(), sharded_->owned_params(), mine.size());
    for (size_t i = 0; i < owned.ranges().size(); ++i)
      for (size_t k = owned.ranges()[i].lo; k < owned.ranges()[i].hi; ++k) {
        float& x = mine[owned.at(i) + k - owned.ranges()[i].lo];
        x = updated(k, x);
      }
    backend_.upload(sharded_->owned_params(), mine.data(), mine.size());
    sharded_->params_updated();
  }

 private:
  std::vector<float> boundary_of(CBuf<float> x, size_t n) {
    std::vector<float> host(n);
    backend_.download(host.data(), x, n);
    return host;
  }

  Case s_;
  ModelConfig cfg_;
  const MpiComm& dp_;
  CpuBackend<float> backend_;
  std::unique_ptr<Model<float>> plain_, lent_;
  std::unique_ptr<ShardedUnits> sharded_;
};

// Two steps with an update between: losses equal the plain model's bit for bit, gradients are
// the all-reduced pieces within `bound` (0: bit for bit), gather_whole() and (ZeRO-2) the model's
// copy equal the plain parameters before and after the update.
void check(const Case& s, double bound) {
  const MpiComm& world = MpiComm::world();
  MpiCommunicator dp(world.get());
  Pair pair(s, dp, nullptr, world);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(name(s) + " step " + std::to_string(step));
    for (const auto& [plain, sharded] : pair.step()) EXPECT_EQ(plain, sharded);
    EXPECT_LE(pair.grad_error(), bound);
    Communicator* experts = s.sharding.expert_dp;
    EXPECT_TRUE(same_bits(pair.sharded().gather_whole(dp, experts), pair.plain_params()));
    pair.update();
    EXPECT_TRUE(same_bits(pair.sharded().gather_whole(dp, experts), pair.plain_params()));
    if (s.level == 2) {
      std::vector<float> copy(pair.lent().num_params());
      pair.backend().download(copy.data(), pair.lent().params(), copy.size());
      EXPECT_TRUE(same_bits(copy, pair.plain_params()));
    }
  }
}

// Sums of 2 floats are the same in any order; at 4 ranks MPI's all-reduce and reduce-scatter
// may add in different orders (measured: the same bits, HSDP too), and 2 micro-batches are
// summed (a1+b1)+(a2+b2) against (a1+a2)+(b1+b2): measured at most 1.8e-7 (2 ranks) and 2.4e-7
// (4 ranks) of the largest gradient. Allowed 1e-6.
double grad_bound(int micro_batches) {
  return MpiComm::world().size() == 2 && micro_batches == 1 ? 0.0 : 1e-6;
}

std::vector<Case> setups() {
  std::vector<Case> out;
  auto add = [&](Arch arch, int level, bool reshard, bool prefetch) {
    Case c;
    c.arch = arch;
    c.level = level;
    c.sharding = {level, reshard, prefetch};
    out.push_back(c);
  };
  for (Arch arch : {Arch::Gpt2, Arch::Llama}) {
    add(arch, 2, true, true);
    for (bool prefetch : {true, false})
      for (bool reshard : {true, false}) add(arch, 3, reshard, prefetch);
  }
  return out;
}

}  // namespace

TEST(ShardedUnits, OneMicroBatchEqualsPlainDataParallel) {
  for (const Case& s : setups()) check(s, grad_bound(1));
}

TEST(ShardedUnits, TwoMicroBatchesEqualPlainDataParallelWithinBound) {
  for (Case s : setups()) {
    s.micro_batches = 2;
    check(s, grad_bound(2));
  }
}

// Pipeline stages: the first (blocks 0 and 1, the embedding) and the last (block 2, the head; for
// gpt2 its own copy of the tied wte), each with its stage boundary fed as the pipeline would.
TEST(ShardedUnits, PipelineStagesEqualPlainDataParallel) {
  for (const ModelShard& stage :
       {ModelShard{1, 0, 0, 2, true, false}, ModelShard{1, 0, 2, 3, false, true}})
    for (Case s : setups()) {
      s.stage = stage;
      check(s, grad_bound(1));
    }
}

// 2-byte gathers: the bf16 compute copy moves as bf16 bits, updated or not.
TEST(ShardedUnits, Bf16StorageEqualsPlainDataParallel) {
  CpuBackend<float> probe(1);
  if (!probe.stores(Precision::Bf16)) GTEST_SKIP() << "the CPU backend stores no bf16";
  for (Case s : setups()) {
    s.storage = Precision::Bf16;
    check(s, grad_bound(1));
  }
}

// HSDP: units split over shard groups of 2, the pieces all-reduced over the replica groups.
TEST(ShardedUnits, HybridShardingEqualsPlainDataParallel) {
  const MpiComm& world = MpiComm::world();
  if (world.size() != 4) GTEST_SKIP() << "needs 4 ranks";
  const Grid grid(world, GridShape{4, 1, 1}, 2);
  MpiCommunicator shard(grid.dp_shard().get()), replicas(grid.dp_replica().get());
  for (const Case& s : setups()) {
    SCOPED_TRACE(name(s));
    Pair pair(s, shard, &replicas, grid.dp());
    // The units are split in 2, not 4: the shard group's pieces make the whole stage.
    unsigned long held = pair.sharded().owned().size();
    ASSERT_EQ(
        MPI_Allreduce(MPI_IN_PLACE, &held, 1, MPI_UNSIGNED_LONG, MPI_SUM, grid.dp_shard().get()),
        MPI_SUCCESS);
    EXPECT_EQ(held, pair.lent().num_params());
    for (const auto& [plain, sharded] : pair.step()) EXPECT_EQ(plain, sharded);
    EXPECT_LE(pair.grad_error(), grad_bound(1));
  }
}

// Expert parallelism's segments: the llama MLP weights stand for the ep-split expert ranges
// (inside each block unit), reduce-scattered and gathered over an expert-dp group of the ranks of
// the same parity (size 2 at 4 ranks), the rest over dp; the reference sums them the same way.
// ZeRO-2's owned pieces then lie apart (a compact copy), ZeRO-3's units are three segments.
TEST(ShardedUnits, ExpertSegmentsGoOverTheExpertGroup) {
  const MpiComm& world = MpiComm::world();
  const MpiComm parity = world.split(world.rank() % 2, world.rank());
  MpiCommunicator expert_dp(parity.get());
  std::vector<FlatRange> experts;
  const ParamLayout layout(tiny(Arch::Llama));
  for (const ParamTensor& t : layout.tensors())
    if (t.name.ends_with("mlp.fc.weight") || t.name.ends_with("mlp.proj.weight"))
      experts.push_back({t.offset, t.offset + t.numel});
  ASSERT_EQ(experts.size(), 6u);
  for (Case s : setups()) {
    if (s.arch != Arch::Llama) continue;
    s.sharding.expert_dp = &expert_dp;
    s.sharding.expert_ranges = experts;
    check(s, grad_bound(1));
  }
}
