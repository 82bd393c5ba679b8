// The layout planner: its memory model against a hand computation for a tiny model and against
// what the real Model allocates; its time model against a hand computation; the search's
// rejections; reading the model and cluster files.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/parallel/ring_attention.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"
#include "mpitrain/planner/cluster.hpp"
#include "mpitrain/planner/inputs.hpp"
#include "mpitrain/planner/micro_batch_auto.hpp"
#include "mpitrain/planner/planner.hpp"
#include "mpitrain/planner/report.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/gather.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;

namespace {

// gpt2, L2 H2 C8 F32, vocabulary 100 (padded 128), 4 positions. Parameters (params.hpp):
//   wte 128*8 = 1024, wpe 4*8 = 32, lnf 2*8 = 16,
//   a block: ln1 16 + qkv 24*8 + 24 + proj 8*8 + 8 + ln2 16 + fc 32*8 + 32 + proj 8*32 + 8 = 872
//   whole model 1024 + 32 + 2*872 + 16 = 2816.
ModelConfig tiny() {
  ModelConfig c;
  c.arch = Arch::Gpt2;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.d_model = 8;
  c.d_ff = 32;
  c.vocab_size = 100;
  c.max_seq_len = 4;
  return c;
}

// llama L2 H2 C8 F32, vocabulary 100 (padded 128), untied, as tiny(); layer 1 an MoE layer
// (moe-every 2) of E 4 experts of width Fe 16, top-2, one shared expert. Parameters:
//   wte 1024, lm_head 1024, lnf 8,
//   block 0 (dense): ln1 8 + qkv 24*8 + proj 8*8 + ln2 8 + fc 64*8 + proj 8*32 = 1040
//   block 1 (MoE):   ln1 8 + qkv 192 + proj 64 + ln2 8 + shared fc 32*8 + proj 8*16
//                    + router 4*8 + experts fc 4*32*8 + experts proj 4*8*16 = 2224
//   whole model 1024 + 1024 + 8 + 1040 + 2224 = 5320.
ModelConfig tiny_moe() {
  ModelConfig c = tiny();
  c.set_arch(Arch::Llama);
  c.n_experts = 4;
  c.top_k = 2;
  c.moe_ff = 16;
  c.n_shared_experts = 1;
  c.moe_every = 2;
  return c;
}

Cluster four_cpu_ranks() {  // one node of 4 CPU ranks, 1 GFLOP/s, 1 GB/s, 1 GB each
  Cluster c;
  c.cpu = true;
  c.cores_per_node = 4;
  c.ranks_per_node = 4;
  c.peak_flops = 1e9;
  c.mem_bw = 1e9;
  c.intra_bw = 1e9;
  c.mem_bytes = 1e9;
  return c;
}

RunShape tiny_run() {  // 4 sequences of 4 tokens per step, fp32 on CPU
  RunShape r;
  r.seq_len = 4;
  r.global_batch = 4;
  return r;
}

// Activations of the tiny model for B = 2, T = 4 (N = 8 rows, NC = 64, P = 2*2*4 = 16,
// QKV = 24, A = 8, FC = F = 32, Vl = 128):
//   block   = 5*64 + 4*8 + 8*24 + 8*8 + 8*32 + 8*32 = 1120
//   head    = 64 + 2*8 + 8*128 = 1104                     (last stage)
//   scratch = 2*64 + 8*24 + 8*8 + 16 + 8*32 + 8*32 + 4*8 = 944
//   none:      kept 1120 + 64 + 16 = 1200, slot 64 + 2*1200 + 1104 = 3568, total 3568 + 944 = 4512
//   selective: kept 1120 - 64 + 64 = 1120, shared 64 + 16 = 80, slot 3408, total 80 + 3408 + 944 = 4432
//   full:      kept 64, shared 1120 + 16 = 1136, slot 1296, total 1136 + 1296 + 944 = 3376
TEST(PlannerMemory, ActivationsOfATinyModelByHand) {
  const ModelShard whole;
  EXPECT_EQ(activation_elements(tiny(), whole, 2, 4, 1, Recompute::None).total(), 4512u);
  EXPECT_EQ(activation_elements(tiny(), whole, 2, 4, 1, Recompute::Selective).total(), 4432u);
  EXPECT_EQ(activation_elements(tiny(), whole, 2, 4, 1, Recompute::Full).total(), 3376u);
  EXPECT_EQ(activation_elements(tiny(), whole, 2, 4, 3, Recompute::None).total(), 3 * 3568u + 944u);
}

TEST(PlannerMemory, OneRankFp32ByHand) {
  // dp1 tp1 pp1, micro-batch 2: m = 2 micro-batches.
  const Layout layout{1, 1, 1, 2, false, Recompute::None};
  const MemoryEstimate e = layout_memory(tiny(), tiny_run(), layout, 1000.0);
  EXPECT_DOUBLE_EQ(e.params, 2816 * 4.0);
  EXPECT_DOUBLE_EQ(e.grads, 2816 * 4.0);
  EXPECT_DOUBLE_EQ(e.optimizer, 2816 * 8.0);  // AdamW m and v
  EXPECT_DOUBLE_EQ(e.master, 0.0);
  EXPECT_DOUBLE_EQ(e.activations, 4512 * 4.0);
  EXPECT_DOUBLE_EQ(e.buffers, 4.0 * 2 * (2 + 1) * 8);  // int32 tokens and targets, 3 x 8 rows
  EXPECT_DOUBLE_EQ(e.baseline, 1000.0);
  EXPECT_DOUBLE_EQ(e.total(), 11264 + 11264 + 22528 + 18048 + 192 + 1000.0);
  RunShape sgd = tiny_run();
  sgd.optimizer_states = 1;  // one momentum buffer
  EXPECT_DOUBLE_EQ(layout_memory(tiny(), sgd, layout, 1000.0).optimizer, 2816 * 4.0);
}

TEST(PlannerMemory, ZeroShardsTheOptimizerStateAndTheMaster) {
  RunShape run = tiny_run();
  run.precision = Precision::Bf16;
  run.global_batch = 8;
  // dp2, micro-batch 2: m = 2. bf16 on CPU keeps the compute tensors in 2 bytes plus an fp32
  // master copy; of the 4512 activation elements, 160 are fp32 statistics: 2 layers x (4N norm
  // statistics + P row log-sum-exps) + 2N (lnf), and the scratch's P + 4N (N = 8, P = 16).
  const Layout plain{2, 1, 1, 2, false, Recompute::None}, zero{2, 1, 1, 2, true, Recompute::None};
  const MemoryEstimate a = layout_memory(tiny(), run, plain, 0.0);
  const MemoryEstimate b = layout_memory(tiny(), run, zero, 0.0);
  EXPECT_DOUBLE_EQ(a.params, 2816 * 2.0);
  EXPECT_DOUBLE_EQ(a.grads, 2816 * 4.0);
  EXPECT_DOUBLE_EQ(a.activations, 4352 * 2.0 + 160 * 4.0);
  EXPECT_DOUBLE_EQ(a.optimizer, 2816 * 8.0);
  EXPECT_DOUBLE_EQ(a.master, 2816 * 4.0);
  EXPECT_DOUBLE_EQ(b.optimizer, 1408 * 8.0);  // 2816 / dp
  EXPECT_DOUBLE_EQ(b.master, 1408 * 4.0);
  EXPECT_DOUBLE_EQ(a.activations, b.activations);
  // The GPU backend keeps its compute tensors in 2 bytes too (no host-side token buffers).
  run.gpu = true;
  const MemoryEstimate g = layout_memory(tiny(), run, zero, 0.0);
  EXPECT_DOUBLE_EQ(g.params, 2816 * 2.0);
  EXPECT_DOUBLE_EQ(g.grads, 2816 * 4.0);
  EXPECT_DOUBLE_EQ(g.activations, 4352 * 2.0 + 160 * 4.0);
  EXPECT_DOUBLE_EQ(g.master, 1408 * 4.0);
}

// Under ZeRO-2/3 a rank holds S = the sum of its largest piece of each unit, computed here from
// the units ParamLayout lists. Four layers, so that ZeRO-3's two gathered blocks are fewer than
// the stage's: units wte 1024, wpe 32, 4 blocks of 872, lnf 16 (P = 4560); pieces over dp 4
// (ceil(n / 4) rounded up to 16): 256, 16, 4 x 224, 16 -> S = 1184; the unit gradient buffers
// G = 1024 + 32 + 16 + 2 x 872 = 2816.
double largest_pieces(const ParamLayout& layout, int ranks) {
  double s = 0;
  for (const FlatRange& unit : layout.units()) s += zero_range(unit.size(), ranks, 0).size();
  return s;
}

TEST(PlannerMemory, ZeroTwoAndThreeShardByUnitByHand) {
  ModelConfig four = tiny();
  four.n_layer = 4;
  const ParamLayout params(four);
  ASSERT_EQ(params.total(), 4560u);
  ASSERT_EQ(largest_pieces(params, 4), 1184.0);
  RunShape run = tiny_run();
  run.global_batch = 8;  // dp4, micro-batch 2: m = 1
  const Layout plain{4, 1, 1, 2, 0, Recompute::None};
  Layout two = plain, three = plain, kept = plain;
  two.zero = 2;
  three.zero = 3;
  kept.zero = 3;
  kept.reshard_after_forward = false;
  const MemoryEstimate z0 = layout_memory(four, run, plain, 0.0);
  const MemoryEstimate z2 = layout_memory(four, run, two, 0.0);
  const MemoryEstimate z3 = layout_memory(four, run, three, 0.0);
  const MemoryEstimate z3k = layout_memory(four, run, kept, 0.0);
  // ZeRO-2 owns one contiguous range, zero_range(4560, 4): 1152 floats, updated in place in the
  // whole copy; ZeRO-3 a piece of every unit (1184 in all) in a buffer of its own.
  EXPECT_DOUBLE_EQ(z2.params, 4560 * 4.0);
  EXPECT_DOUBLE_EQ(z2.grads, (1152 + 2816) * 4.0);
  EXPECT_DOUBLE_EQ(z2.optimizer, 1152 * 8.0);
  EXPECT_DOUBLE_EQ(z2.master, 0.0);
  EXPECT_DOUBLE_EQ(z3.params, (1184 + 2816) * 4.0);   // the outer units + 2 blocks gathered
  EXPECT_DOUBLE_EQ(z3k.params, (1184 + 4560) * 4.0);  // every unit stays gathered
  for (const MemoryEstimate& e : {z3, z3k}) {
    EXPECT_DOUBLE_EQ(e.grads, (1184 + 2816) * 4.0);
    EXPECT_DOUBLE_EQ(e.optimizer, 1184 * 8.0);
  }
  // No gradient bucket for MPI to copy (4560 floats, under --bucket-mb): they reduce-scatter the
  // unit buffers in place; the token lists remain.
  EXPECT_DOUBLE_EQ(z0.buffers, 4.0 * 2 * 2 * 8 + 4560 * 4.0);
  EXPECT_DOUBLE_EQ(z2.buffers, 4.0 * 2 * 2 * 8);
  EXPECT_DOUBLE_EQ(z3.activations, z0.activations);
  // bf16: 2-byte compute copies and pieces, the fp32 master of the piece.
  run.precision = Precision::Bf16;
  const MemoryEstimate b2 = layout_memory(four, run, two, 0.0);
  const MemoryEstimate b3 = layout_memory(four, run, three, 0.0);
  EXPECT_DOUBLE_EQ(b2.params, 4560 * 2.0);
  EXPECT_DOUBLE_EQ(b2.master, 1152 * 4.0);
  EXPECT_DOUBLE_EQ(b2.grads, (1152 + 2816) * 4.0);
  EXPECT_DOUBLE_EQ(b3.params, (1184 + 2816) * 2.0);
  EXPECT_DOUBLE_EQ(b3.master, 1184 * 4.0);
}

// The target: ZeRO-3 at dp 4 holds at most 0.35 x ZeRO-0's parameters + gradients +
// optimizer state (fp32 AdamW: 16 bytes per parameter). gpt2 L16 C64 F256 V256, 64 positions:
// wte 16384, wpe 4096, a block 49984, lnf 128, P = 820352; over dp 4 the pieces 4096, 1024,
// 12496, 32 -> S = 205088; G = 16384 + 4096 + 128 + 2 x 49984 = 120576. ZeRO-3: params + grads =
// 2 (S + G) x 4, optimizer 8 S -> 4246016 bytes against 16 x 820352 = 13125632: 0.3235 (the 1/4
// share plus the gathered units and their gradient buffers).
TEST(PlannerMemory, ZeroThreeAtDp4IsAThirdOfZeroZero) {
  ModelConfig c = tiny();
  c.n_layer = 16;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.d_model = 64;
  c.d_ff = 256;
  c.vocab_size = 256;
  c.max_seq_len = 64;
  ASSERT_EQ(ParamLayout(c).total(), 820352u);
  ASSERT_EQ(largest_pieces(ParamLayout(c), 4), 205088.0);
  RunShape run = tiny_run();
  run.global_batch = 8;
  auto held = [&](int zero) {
    const MemoryEstimate e = layout_memory(c, run, {4, 1, 1, 2, zero, Recompute::None}, 0.0);
    return e.params + e.grads + e.optimizer + e.master;
  };
  EXPECT_DOUBLE_EQ(held(0), 13125632.0);
  EXPECT_DOUBLE_EQ(held(3), 4246016.0);
  EXPECT_LE(held(3), 0.35 * held(0));
  EXPECT_LT(held(3), held(2));
  EXPECT_LT(held(2), held(1));
}

// HSDP: sharded over groups of D dp ranks, every rank holds the pieces over D, not over dp.
TEST(PlannerMemory, HybridShardingHoldsThePiecesOverTheShardGroup) {
  RunShape run = tiny_run();
  run.global_batch = 16;
  Layout hsdp{8, 1, 1, 2, 3, Recompute::None};
  hsdp.zero_shard = 2;
  const Layout whole{8, 1, 1, 2, 3, Recompute::None};
  // Pieces over 2: wte 512, wpe 16, 2 blocks of 448 (436 rounded up), lnf 16 -> S = 1440.
  ASSERT_EQ(largest_pieces(ParamLayout(tiny()), 2), 1440.0);
  EXPECT_DOUBLE_EQ(layout_memory(tiny(), run, hsdp, 0.0).optimizer, 1440 * 8.0);
  EXPECT_DOUBLE_EQ(layout_memory(tiny(), run, whole, 0.0).optimizer,
                   largest_pieces(ParamLayout(tiny()), 8) * 8.0);
  EXPECT_LT(layout_memory(tiny(), run, whole, 0.0).total(),
            layout_memory(tiny(), run, hsdp, 0.0).total());
}

// Context parallelism 2: each rank holds T/2 rows of its micro-batch's sequences (activations
// as for T = 2) plus the ring's buffers: two packed K/V blocks (B*T/2 rows of 2*NKV*hs = 16) and
// fp32 accumulators (out/dq 8 wide, dK/dV part and two travelling 16 wide, row dots NH = 2 wide):
// 4 rows x (2*16 + 8 + 3*16 + 2) = 360 floats. ZeRO-1 shards over dp x cp = 2.
TEST(PlannerMemory, ContextParallelHoldsTheChunksAndTheRing) {
  const Layout cp2{1, 1, 1, 2, 1, Recompute::None, true, 0, false, 2};
  const MemoryEstimate e = layout_memory(tiny(), tiny_run(), cp2, 0.0);
  EXPECT_DOUBLE_EQ(e.activations,
                   activation_elements(tiny(), ModelShard{}, 2, 2, 1, Recompute::None).bytes(4.0) +
                       360 * 4.0);
  EXPECT_DOUBLE_EQ(RingAttention::bytes(2, 2, 2, 2, 4, Precision::Fp32), 360 * 4.0);
  EXPECT_DOUBLE_EQ(e.optimizer, 1408 * 8.0);  // 2816 / (dp x cp)
  EXPECT_DOUBLE_EQ(e.buffers, 4.0 * 2 * (2 + 1) * 4 + 2816 * 4.0);  // half the token rows; a bucket
}

// On the CPU, 2-byte tensors are widened into four fp32 staging slots that only grow: the first
// three to a blocked product's tile (2^22 floats and its rows' padding, 2^16: 4259840) at least,
// the fourth to the other staged ops' blocks (2^18), and the attention's whole sequences where
// larger. T 262144 of the tiny model (QKV 24, A 8 floats a row): qkv, its keys and dqkv 6291456
// floats each, dout 2097152: 20971520 floats. Context parallelism 2 (T 524288, 262144 rows): qkv
// and keys 6291456 each, dout 2097152 -> 4259840 (the tiles), the fourth slot 262144: 17104896.
// Short sequences: the floors, 13041664.
TEST(PlannerMemory, TwoByteCpuStagingHoldsTilesAndWholeSequences) {
  EXPECT_EQ(cpu_staging_bytes(1, 262144, 2, 2, 4, false), 20971520u * 4);
  EXPECT_EQ(cpu_staging_bytes(1, 262144, 2, 2, 4, true), 17104896u * 4);
  EXPECT_EQ(cpu_staging_bytes(2, 64, 2, 2, 4, false), 13041664u * 4);
  ModelConfig c = tiny();
  c.max_seq_len = 524288;
  RunShape run = tiny_run();
  run.seq_len = 262144;
  run.global_batch = 1;
  Layout one{1, 1, 1, 1, 0, Recompute::None};
  const double fp32 = layout_memory(c, run, one, 0.0).buffers;
  run.precision = Precision::Bf16;
  EXPECT_DOUBLE_EQ(layout_memory(c, run, one, 0.0).buffers - fp32, 20971520.0 * 4);
  run.seq_len = 524288;
  one.cp = 2;
  const double cp_bf16 = layout_memory(c, run, one, 0.0).buffers;
  run.precision = Precision::Fp32;
  EXPECT_DOUBLE_EQ(cp_bf16 - layout_memory(c, run, one, 0.0).buffers, 17104896.0 * 4);
  run.gpu = true;  // the GPU's attention reads 2-byte tensors in place
  run.precision = Precision::Bf16;
  EXPECT_EQ(layout_memory(c, run, one, 0.0).buffers, 0.0);
}

TEST(PlannerMemory, PipelineStagesByHand) {
  // pp2 with 1F1B and m = 2: stage 0 keeps 2 slots of layer 0; stage 1 one slot of layer 1 and
  // the head. Stage 0 holds wte, wpe and block 0 (1024 + 32 + 872 = 1928 parameters); stage 1
  // block 1, lnf and the tied wte copy (872 + 16 + 1024 = 1912).
  const Layout layout{1, 1, 2, 2, false, Recompute::None};
  const std::vector<int> first = {0, 1, 2};
  const MemoryEstimate s0 = stage_memory(tiny(), tiny_run(), layout, first, 0, 0.0);
  const MemoryEstimate s1 = stage_memory(tiny(), tiny_run(), layout, first, 1, 0.0);
  EXPECT_DOUBLE_EQ(s0.params, 1928 * 4.0);
  EXPECT_DOUBLE_EQ(s1.params, 1912 * 4.0);
  EXPECT_DOUBLE_EQ(s0.activations, (2 * (64 + 1200) + 944) * 4.0);
  EXPECT_DOUBLE_EQ(s1.activations, (64 + 1200 + 1104 + 944) * 4.0);
  // Input-gradient copies, 2 slots x 8 rows x 8 floats, and the token lists.
  EXPECT_DOUBLE_EQ(s0.buffers, 2 * 8 * 8 * 4.0 + 4.0 * 2 * 3 * 8);
  EXPECT_DOUBLE_EQ(layout_memory(tiny(), tiny_run(), layout, 0.0).total(),
                   std::max(s0.total(), s1.total()));
}

// The planner's count is what Model really allocates, for every kind of stage, tensor
// parallelism (with and without sequence parallelism), grouped-query attention, mixture of
// experts (with and without shared experts and dense layers) and each recomputation mode.
TEST(PlannerMemory, ActivationsEqualWhatTheModelAllocates) {
  mpitrain::test::start_mpi();
  CpuBackend<float> backend(1);
  MpiCommunicator self(MPI_COMM_SELF);  // a tp group is needed to build a shard; never used here
  ModelConfig llama = tiny();
  llama.set_arch(Arch::Llama);
  llama.n_head = 4;
  llama.n_kv_head = 2;
  llama.n_layer = 3;
  ModelConfig qk_norm = llama;  // its q/k norm input and statistics are kept per block
  qk_norm.qk_norm = true;
  ModelConfig moe = tiny_moe();  // layer 1 MoE with a shared expert, layers 0 and 2 dense
  moe.n_layer = 3;
  ModelConfig all_moe = moe;  // every layer MoE, no dense MLP at all
  all_moe.moe_every = 1;
  all_moe.n_shared_experts = 0;
  ModelConfig gated = moe;  // its shared expert gated: the gate and the shared output kept
  gated.moe_shared_gate = true;
  for (const ModelConfig& config : {tiny(), llama, qk_norm, moe, all_moe, gated}) {
    for (int tp : {1, 2}) {
      for (int pp : {1, 2}) {
        const std::vector<int> first = pipeline_layer_split(config.n_layer, pp, "");
        for (int stage = 0; stage < pp; ++stage) {
          const ModelShard shard = shard_of({1, tp, pp}, first, 0, stage);
          for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
            for (Precision storage : {Precision::Fp32, Precision::Bf16}) {  // 4 and 2 bytes
              for (bool sp : {false, true}) {  // sequence parallelism (only at tp 2)
                const int slots = pp - stage;
                Model<float> model(config, backend, shard, 2, 4, slots, &self,
                                   {storage, rc, storage, false, false, sp});
                const double w = storage == Precision::Fp32 ? 4.0 : 2.0;
                EXPECT_EQ(model.activation_bytes(),
                          activation_elements(config, shard, 2, 4, slots, rc, sp).bytes(w))
                    << to_string(config.arch) << " E" << config.n_experts << " tp " << tp << " stage " << stage << "/" << pp
                    << " recompute " << to_string(rc) << " storage " << to_string(storage)
                    << " sp " << sp;
                EXPECT_EQ(model.param_bytes(), ParamLayout(config, shard).total() * w);
              }
            }
          }
        }
      }
    }
  }
}

// Every expert's weights, gradients and optimizer state are held (ep 1), the MoE block counted
// on the stage that holds it: by hand, and as ParamLayout lays out every stage of pp 1 to 4.
TEST(PlannerMemory, ExpertParametersByHandAndPerStage) {
  const ModelConfig moe = tiny_moe();
  ASSERT_EQ(ParamLayout(moe).total(), 5320u);
  const Layout one{1, 1, 1, 2, 0, Recompute::None};
  const MemoryEstimate e = layout_memory(moe, tiny_run(), one, 0.0);
  EXPECT_DOUBLE_EQ(e.params, 5320 * 4.0);
  EXPECT_DOUBLE_EQ(e.grads, 5320 * 4.0);
  EXPECT_DOUBLE_EQ(e.optimizer, 5320 * 8.0);
  // pp 2: stage 0 wte + block 0 = 2064, stage 1 block 1 (the MoE one) + lnf + lm_head = 3256.
  const Layout two{1, 1, 2, 2, 0, Recompute::None};
  const std::vector<int> first = {0, 1, 2};
  EXPECT_DOUBLE_EQ(stage_memory(moe, tiny_run(), two, first, 0, 0.0).params, 2064 * 4.0);
  EXPECT_DOUBLE_EQ(stage_memory(moe, tiny_run(), two, first, 1, 0.0).params, 3256 * 4.0);
  // ZeRO-3 over dp 2 (m = 1): the outer units + 2 of the largest block (the MoE one) gathered.
  RunShape run = tiny_run();
  run.global_batch = 4;
  Layout three{2, 1, 1, 2, 3, Recompute::None};
  const StageUnits u = stage_units(moe, ModelShard{}, 2);
  EXPECT_DOUBLE_EQ(u.params(), 5320.0);
  EXPECT_DOUBLE_EQ(u.unit_buffers(), 1024 + 1024 + 8 + 2 * 2224.0);
  EXPECT_DOUBLE_EQ(u.shard(), 512 + 512 + 8 + 528 + 1120.0);  // pieces rounded up to 16
  EXPECT_DOUBLE_EQ(layout_memory(moe, run, three, 0.0).params, (u.shard() + u.unit_buffers()) * 4);
  for (int every : {1, 2, 3}) {
    ModelConfig c = tiny_moe();
    c.n_layer = 6;
    c.moe_every = every;
    for (int pp : {1, 2, 3, 4}) {
      const std::vector<int> split = pipeline_layer_split(c.n_layer, pp, "");
      for (int stage = 0; stage < pp; ++stage) {
        const ModelShard shard = shard_of({1, 1, pp}, split, 0, stage);
        const ParamLayout layout(c, shard);
        const StageUnits units = stage_units(c, shard, 3);
        double largest = 0, pieces = 0;
        for (const FlatRange& unit : layout.units()) {
          largest = std::max(largest, static_cast<double>(unit.size()));
          pieces += static_cast<double>(zero_range(unit.size(), 3, 0).size());
        }
        EXPECT_EQ(units.params(), static_cast<double>(layout.total()))
            << "every " << every << " stage " << stage << "/" << pp;
        EXPECT_EQ(units.largest, largest) << "every " << every << " stage " << stage << "/" << pp;
        EXPECT_EQ(units.shard(), pieces) << "every " << every << " stage " << stage << "/" << pp;
      }
    }
  }
}

// Expert parallelism: a rank holds E/ep of the routed experts (the MoE block's experts fc
// 4*32*8 + proj 4*8*16 = 1536 become 768 at ep 2: 5320 - 768 = 4552), and the token all-to-alls
// cost time at ep > 1 only.
TEST(PlannerMemory, ExpertParallelHoldsItsShareOfTheExperts) {
  const ModelConfig moe = tiny_moe();
  RunShape run = tiny_run();
  run.global_batch = 4;
  Layout ep1{2, 1, 1, 2, 0, Recompute::None};
  Layout ep2 = ep1;
  ep2.ep = 2;
  EXPECT_DOUBLE_EQ(layout_memory(moe, run, ep1, 0.0).params, 5320 * 4.0);
  EXPECT_DOUBLE_EQ(layout_memory(moe, run, ep2, 0.0).params, 4552 * 4.0);
  Cluster c;
  c.peak_flops = 1e6;
  c.mem_bw = 1e6;
  c.mem_bytes = 1e9;
  const TimeEstimate t1 = estimate_time(moe, run, ep1, c, Calibration{});
  const TimeEstimate t2 = estimate_time(moe, run, ep2, c, Calibration{});
  EXPECT_EQ(t1.ep_comm, 0.0);
  EXPECT_GT(t2.ep_comm, 0.0);
  // ZeRO-1/2 (zero_owned): the 4552 - 768 dense elements split over dp 2 (pieces of 1904), the
  // 768 held expert elements over expert-dp = dp / ep = 1; ZeRO-1 adds the compact copies of the
  // owned parameters and gradients (bucket_sync.hpp).
  for (int zero : {1, 2}) {
    Layout z = ep2;
    z.zero = zero;
    const MemoryEstimate e = layout_memory(moe, run, z, 0.0);
    EXPECT_DOUBLE_EQ(e.optimizer, 4.0 * run.optimizer_states * (1904 + 768)) << "zero " << zero;
    EXPECT_DOUBLE_EQ(e.params, (4552 + 1904 + 768) * 4.0) << "zero " << zero;
  }
}

// A token's products use the router and top_k of the n_experts: with top-1 of 4 experts of width
// 16, an MoE model computes what a dense model of d-ff 16 does plus the router (4 x 8 per MoE
// layer), 2 x 32 x 2 layers = 128 flops per token forward; at 1e6 x 0.5 FLOP/s, 2 micro-batches of
// 8 tokens, forward and backward: 3 x 128 x 16 / 5e5 = 0.012288 s more.
TEST(PlannerTime, ExpertsCountTheirActiveShare) {
  ModelConfig moe = tiny_moe();
  moe.n_shared_experts = 0;
  moe.moe_every = 1;
  moe.top_k = 1;
  ModelConfig dense = tiny_moe();
  dense.n_experts = 0;
  dense.d_ff = 16;
  EXPECT_DOUBLE_EQ(model_flops_per_token(moe, 4) - model_flops_per_token(dense, 4), 6.0 * 64);
  Cluster c;
  c.peak_flops = 1e6;
  c.mem_bw = 1e6;
  c.mem_bytes = 1e9;
  const Layout layout{1, 1, 1, 2, 0, Recompute::None};
  const TimeEstimate a = estimate_time(moe, tiny_run(), layout, c, Calibration{});
  const TimeEstimate b = estimate_time(dense, tiny_run(), layout, c, Calibration{});
  EXPECT_NEAR(a.compute - b.compute, 0.012288, 1e-12);
}

// One rank, fp32: only compute and the optimizer. Matmul parameters 2816 - wpe 32 = 2784 (the
// tied wte is the head); forward flops per token 2*2784 + 4*L*d*T = 5568 + 256 = 5824; a
// micro-batch of 8 tokens forward and backward 3*8*5824 = 139776 flops, two of them 279552, at
// 1e6 x 0.5 FLOP/s = 0.559104 s. AdamW plus clearing and norm: 36 bytes x 2816 at 1e6 B/s.
TEST(PlannerTime, OneRankByHand) {
  Cluster c;
  c.peak_flops = 1e6;
  c.mem_bw = 1e6;
  c.mem_bytes = 1e9;
  Calibration cal;
  cal.efficiency = 0.5;
  const TimeEstimate t = estimate_time(tiny(), tiny_run(), {1, 1, 1, 2, false, Recompute::None}, c, cal);
  EXPECT_NEAR(t.compute, 0.559104, 1e-12);
  EXPECT_NEAR(t.optimizer, 36 * 2816 / 1e6, 1e-12);
  EXPECT_NEAR(t.step, 0.559104 + 0.101376, 1e-12);
  EXPECT_EQ(t.tp_comm + t.p2p + t.dp_exposed + t.bubble, 0.0);
  EXPECT_DOUBLE_EQ(model_flops_per_token(tiny(), 4), 6.0 * 2784 + 12.0 * 2 * 8 * 4);
  // A sliding window shorter than the sequence bounds the attention's context; a longer one not.
  ModelConfig windowed = tiny();
  windowed.sliding_window = 3;
  EXPECT_DOUBLE_EQ(model_flops_per_token(windowed, 4), 6.0 * 2784 + 12.0 * 2 * 8 * 3);
  EXPECT_LT(
      estimate_time(windowed, tiny_run(), {1, 1, 1, 2, false, Recompute::None}, c, cal).compute,
      t.compute);
  windowed.sliding_window = 4;
  EXPECT_DOUBLE_EQ(model_flops_per_token(windowed, 4), model_flops_per_token(tiny(), 4));
  // Full recomputation runs each forward twice: 4 passes' worth instead of 3.
  const TimeEstimate f = estimate_time(tiny(), tiny_run(), {1, 1, 1, 2, false, Recompute::Full}, c, cal);
  EXPECT_NEAR(f.compute, 0.559104 * 4 / 3, 1e-12);
}

// ZeRO-2/3 over dp 4 in one node at 1e4 B/s without latency, micro-batch 2 (m = 1): forward
// t_f = 8 tokens x 5824 / 5e5 = 0.093184 s, backward window 2 t_f = 0.186368 s. The stage's
// reduce-scatter and all-gather in fp32 each take 3/4 x 2816 x 4 / 1e4 = 0.8448 s, those of the
// largest unit (wte, 1024) 0.3072 s.
//   ZeRO-2: reduce-scatter max(0.8448 - 0.186368, 0.3072) + all-gather 0.8448 = 1.503232
//   ZeRO-3: forward max(0.8448 - 0.093184, 0.3072) = 0.751616, backward (gather and
//           reduce-scatter) max(1.6896 - 0.186368, 0.6144) = 1.503232: 2.254848
//   kept:   forward gather once 0.751616 + reduce-scatter 0.658432 = 1.410048
//   HSDP, ZeRO-2 over 2 ranks (S = 1440): max(0.5632 - 0.186368, 0.2048) + 0.5632 + the shard's
//           all-reduce over the 2 replicas 1440 x 4 / 1e4 = 0.576: 1.516032
// The by-hand time tests' machine: four_cpu_ranks at 1 MFLOP/s and 1 MB/s of memory, all-reduces
// at intra_bw; the compute at half the peak, no latency.
Cluster slow_cpu_ranks(double intra_bw) {
  Cluster c = four_cpu_ranks();
  c.peak_flops = 1e6;
  c.mem_bw = 1e6;
  c.intra_bw = intra_bw;
  return c;
}
Calibration half_peak_no_latency() {
  Calibration cal;
  cal.efficiency = 0.5;
  cal.latency_s = 0;
  return cal;
}

TEST(PlannerTime, ZeroTwoAndThreeByHand) {
  const Cluster c = slow_cpu_ranks(1e4);
  const Calibration cal = half_peak_no_latency();
  RunShape run = tiny_run();
  run.global_batch = 8;
  Layout two{4, 1, 1, 2, 2, Recompute::None}, three = two, kept = two, hybrid = two;
  three.zero = kept.zero = 3;
  kept.reshard_after_forward = false;
  hybrid.zero_shard = 2;
  const TimeEstimate t2 = estimate_time(tiny(), run, two, c, cal);
  EXPECT_NEAR(t2.compute, 3 * 0.093184, 1e-12);
  EXPECT_NEAR(t2.dp_exposed, 1.503232, 1e-12);
  EXPECT_NEAR(estimate_time(tiny(), run, three, c, cal).dp_exposed, 2.254848, 1e-12);
  EXPECT_NEAR(estimate_time(tiny(), run, kept, c, cal).dp_exposed, 1.410048, 1e-12);
  EXPECT_NEAR(estimate_time(tiny(), run, hybrid, c, cal).dp_exposed, 1.516032, 1e-12);
  // The optimizer over the rank's S = 736 elements (pieces over 4: 256, 16, 2 x 224, 16).
  EXPECT_NEAR(t2.optimizer, 36 * 736 / 1e6, 1e-12);
  // Micro-batch 1 (m = 2): kept gathers once per step, the reduce-scatter runs per micro-batch:
  // max(0.8448 - 0.046592, 0.3072) + 2 x max(0.8448 - 0.093184, 0.3072) = 2.30144.
  kept.micro_batch = 1;
  EXPECT_NEAR(estimate_time(tiny(), run, kept, c, cal).dp_exposed, 2.30144, 1e-12);
}

// Context parallelism 2 on one node of 2 CPU ranks (dp 1), micro-batch 2 of T = 4 (m = 2): each
// rank runs T/2 = 2 rows of each sequence, 4 tokens a micro-batch, each against the whole
// sequence: forward flops per token 2*2784 + 4*2*8*4 = 5824 as at cp 1, t_f = 4 x 5824 / 5e5 =
// 0.046592 s, compute 2 x 3 t_f = 0.279552 (half of cp 1's 0.559104).
// The ring at 1e5 B/s without latency: a K/V block is 4 rows x 2 x 2 heads x 4 = 64 floats,
// 256 bytes: kv = acc = 2.56e-3 s; a ring step's attention 4 x 128 / 5e5 / 2 = 5.12e-4 s.
//   forward per layer   (cp-1) x (2.56e-3 - 5.12e-4) = 2.048e-3
//   backward per layer  (2.56e-3 - 1.024e-3) + (2.56e-3 - 1.024e-3) + 2.56e-3 (home) = 5.632e-3
//   exposed 2 layers x 2 micro-batches x 7.68e-3 = 0.03072; all of it (hidden or not) per layer
//   2 x kv + 2 x acc = 1.024e-2, x 4 = 0.04096. Selective recomputes the ring's forward: + 4 x
//   2.048e-3. The gradients are summed over dp x cp = 2 ranks: an all-reduce of 2816 x 4 bytes,
//   11264 / 1e5 = 0.11264 s, none of it hidden (the last bucket is the whole model).
TEST(PlannerTime, ContextParallelByHand) {
  Cluster c = slow_cpu_ranks(1e5);
  c.cores_per_node = c.ranks_per_node = 2;
  const Calibration cal = half_peak_no_latency();
  Layout cp2{1, 1, 1, 2, 0, Recompute::None};
  cp2.cp = 2;
  const TimeEstimate t = estimate_time(tiny(), tiny_run(), cp2, c, cal);
  EXPECT_NEAR(t.compute, 0.279552, 1e-12);
  EXPECT_NEAR(t.cp_exposed, 0.03072, 1e-12);
  EXPECT_NEAR(t.cp_ring, 0.04096, 1e-12);
  EXPECT_NEAR(t.dp_exposed, 0.11264, 1e-12);
  EXPECT_NEAR(t.optimizer, 36 * 2816 / 1e6, 1e-12);
  EXPECT_NEAR(t.step, 0.279552 + 0.03072 + 0.11264 + 0.101376, 1e-12);
  cp2.recompute = Recompute::Selective;
  EXPECT_NEAR(estimate_time(tiny(), tiny_run(), cp2, c, cal).cp_exposed, 0.03072 + 4 * 2.048e-3,
              1e-12);
  // A fast link hides every message behind its step but the last accumulator's trip home:
  // 256 / 1e9 per layer and micro-batch.
  c.intra_bw = 1e9;
  cp2.recompute = Recompute::None;
  EXPECT_NEAR(estimate_time(tiny(), tiny_run(), cp2, c, cal).cp_exposed, 4 * 256 / 1e9, 1e-15);
}

TEST(PlannerTime, BubbleAndCommunication) {
  Cluster c;
  c.ranks_per_node = 4;
  c.peak_flops = 1e9;
  c.mem_bw = 1e9;
  c.intra_bw = 1e9;
  c.mem_bytes = 1e9;
  RunShape run = tiny_run();
  run.global_batch = 8;
  const Calibration cal;
  // pp2 with m = 4 micro-batches: bubble 1/5 of the pipelined part.
  const TimeEstimate p = estimate_time(tiny(), run, {1, 1, 2, 2, false, Recompute::None}, c, cal);
  EXPECT_DOUBLE_EQ(p.bubble_fraction, 0.2);
  EXPECT_GT(p.p2p, 0.0);
  // A slower interconnect costs tensor parallelism more, and nothing to a single data-parallel
  // rank.
  const Layout tp2{1, 2, 1, 2, false, Recompute::None};
  const TimeEstimate fast = estimate_time(tiny(), run, tp2, c, cal);
  c.intra_bw = 1e6;
  const TimeEstimate slow = estimate_time(tiny(), run, tp2, c, cal);
  EXPECT_GT(slow.tp_comm, fast.tp_comm);
  EXPECT_DOUBLE_EQ(slow.compute, fast.compute);
  EXPECT_GT(slow.exposed_comm_fraction, fast.exposed_comm_fraction);
}

// Four CPU ranks on two cores: a busy rank runs at a core's rate, and the pipeline's idle stage
// lends its core out, so dp2 x pp2 takes the cores' work (2 x m micro-batches at a core's rate),
// not (m + pp - 1) micro-batches at half a core's; with four cores the bubble is there.
TEST(PlannerTime, OversubscribedCoresAreShared) {
  Cluster four;
  four.cpu = true;
  four.cores_per_node = 4;
  four.ranks_per_node = 4;
  four.peak_flops = 1e9;  // a core each
  four.mem_bw = 1e12;
  four.intra_bw = 1e12;
  four.mem_bytes = 1e9;
  Cluster two = four;
  two.cores_per_node = 2;
  two.peak_flops = 0.5e9;  // the same cores' rate, shared by twice the ranks
  Calibration cal;
  cal.latency_s = 0;
  RunShape run = tiny_run();
  run.global_batch = 16;
  const Layout pipe{2, 1, 2, 2, false, Recompute::None};  // m = 4
  const TimeEstimate a = estimate_time(tiny(), run, pipe, four, cal);
  const TimeEstimate b = estimate_time(tiny(), run, pipe, two, cal);
  EXPECT_NEAR(a.bubble_fraction, 0.2, 1e-12);
  EXPECT_EQ(b.bubble, 0.0);
  EXPECT_NEAR(b.compute, 2 * a.compute, 1e-12);
  // Messages wait for a scheduled partner only where ranks outnumber cores.
  cal.scheduling_s = 1e-3;
  EXPECT_EQ(estimate_time(tiny(), run, pipe, four, cal).p2p, a.p2p);
  EXPECT_NEAR(estimate_time(tiny(), run, pipe, two, cal).p2p, b.p2p + 2 * 4 * 2 * 1e-3, 1e-12);
}

TEST(Planner, RejectsWhatCannotRunAndRanksTheRest) {
  ModelConfig m = tiny();
  m.n_head = 2;  // tp 4 cannot split 2 heads
  Cluster c = four_cpu_ranks();
  RunShape run = tiny_run();
  run.global_batch = 8;
  const Plan plan = make_plan(m, run, c, {}, {});
  ASSERT_FALSE(plan.fits.empty());
  for (size_t i = 1; i < plan.fits.size(); ++i)
    EXPECT_LE(plan.fits[i - 1].time.step, plan.fits[i].time.step);
  bool heads = false, layers = false;
  for (const Rejected& r : plan.rejected) {
    heads |= r.tp == 4 && r.reason.find("n-head (2) is not divisible by tp (4)") != std::string::npos;
    layers |= r.pp == 4 && r.reason.find("fewer than the 4 pipeline stages") != std::string::npos;
  }
  EXPECT_TRUE(heads);
  EXPECT_TRUE(layers);
  // With too little memory per rank, every grid is rejected with the smallest requirement.
  c.mem_bytes = 1000;
  const Plan none = make_plan(m, run, c, {}, {});
  EXPECT_TRUE(none.fits.empty());
  bool memory = false;
  for (const Rejected& r : none.rejected) memory |= r.reason.rfind("memory: at least", 0) == 0;
  EXPECT_TRUE(memory);
}

// The planner keeps the margin --micro-batch-size auto keeps (kMemoryMargin of what the
// baseline leaves), so a layout that fits the memory only without it is refused.
TEST(Planner, KeepsTheMicroBatchAutoMargin) {
  EXPECT_DOUBLE_EQ(usable_memory(80.0, 3.0), 3.0 + (1 - kMemoryMargin) * 77.0);
  EXPECT_DOUBLE_EQ(usable_memory(0.5, 3.0), 0.5);  // the baseline alone does not fit
  Cluster c = four_cpu_ranks();
  RunShape run = tiny_run();
  run.global_batch = 8;
  SearchLimits one;
  one.dp = 4, one.micro_batch = 2, one.zero = 0, one.recompute = Recompute::None;
  Calibration cal;
  cal.baseline_bytes = 1e6;
  const Layout l{4, 1, 1, 2, 0, Recompute::None};
  const double need = layout_memory(tiny(), run, l, cal.baseline_bytes).total();
  c.mem_bytes = need + 0.5 * kMemoryMargin * (need - cal.baseline_bytes);  // fits, margin not
  const Plan tight = make_plan(tiny(), run, c, cal, one);
  EXPECT_TRUE(tight.fits.empty());
  ASSERT_EQ(tight.rejected.size(), 1u);
  EXPECT_NE(tight.rejected[0].reason.find("GiB usable"), std::string::npos)
      << tight.rejected[0].reason;
  c.mem_bytes = cal.baseline_bytes + (need - cal.baseline_bytes) / (1 - kMemoryMargin) * 1.001;
  const Plan roomy = make_plan(tiny(), run, c, cal, one);
  ASSERT_EQ(roomy.fits.size(), 1u);
  EXPECT_LE(roomy.fits[0].memory.total(), roomy.usable_bytes);
  // --micro-batch-size auto with the rank's free memory: the same micro-batch, the same margin.
  const MicroBatchPlan automatic =
      plan_micro_batch(tiny(), run, l, c.mem_bytes - cal.baseline_bytes);
  EXPECT_EQ(automatic.micro_batch, 2) << automatic.text;
}

TEST(Planner, SearchLimitsPinALayout) {
  Cluster c = four_cpu_ranks();
  RunShape run = tiny_run();
  run.global_batch = 8;
  SearchLimits only;
  only.dp = 2;
  only.pp = 2;
  only.micro_batch = 2;
  only.zero = 0;
  only.recompute = Recompute::None;
  const Plan plan = make_plan(tiny(), run, c, {}, only);
  ASSERT_EQ(plan.fits.size(), 1u);
  const Layout& l = plan.fits[0].layout;
  EXPECT_EQ(l.dp, 2);
  EXPECT_EQ(l.tp, 1);
  EXPECT_EQ(l.pp, 2);
  EXPECT_EQ(l.micro_batch, 2);
}

// At tp > 1 the planner offers each option with and without sequence parallelism: the same
// layout with its norm/residual activations / tp (less memory) and a little more tp time (the
// backward's gathers again of the normed inputs), and a flag the trainer reads.
TEST(Planner, OffersSequenceParallelismAtTpAboveOne) {
  Cluster c = four_cpu_ranks();
  RunShape run = tiny_run();
  run.global_batch = 8;
  SearchLimits only;
  only.dp = 2, only.tp = 2, only.micro_batch = 2, only.zero = 0;
  only.recompute = Recompute::None;
  const Plan plan = make_plan(tiny(), run, c, {}, only);
  ASSERT_EQ(plan.fits.size(), 2u);
  const Candidate& off = plan.fits[0].layout.sequence_parallel ? plan.fits[1] : plan.fits[0];
  const Candidate& on = plan.fits[0].layout.sequence_parallel ? plan.fits[0] : plan.fits[1];
  ASSERT_TRUE(on.layout.sequence_parallel && !off.layout.sequence_parallel);
  EXPECT_LT(on.memory.activations, off.memory.activations);
  EXPECT_GT(on.time.tp_comm, off.time.tp_comm);
  EXPECT_NE(trainer_flags(on.layout, run).find(" --sequence-parallel"), std::string::npos);
  EXPECT_EQ(trainer_flags(off.layout, run).find("--sequence-parallel"), std::string::npos);
  only.tp = 1, only.dp = 4;  // nothing to split: never offered
  for (const Candidate& one : make_plan(tiny(), run, c, {}, only).fits)
    EXPECT_FALSE(one.layout.sequence_parallel);
}

// The planner searches cp over the divisors of the ranks with 2 cp dividing seq-len: each
// sequence's activations / cp per rank, the layout's flag for the trainer, and the reason where
// the chunks do not divide.
TEST(Planner, SearchesContextParallelism) {
  Cluster c = four_cpu_ranks();
  RunShape run = tiny_run();
  run.global_batch = 8;
  SearchLimits one;
  one.tp = 1, one.pp = 1, one.micro_batch = 1, one.zero = 0, one.recompute = Recompute::None;
  const Plan plan = make_plan(tiny(), run, c, {}, one);
  std::vector<int> cps;
  for (const Candidate& k : plan.fits) {
    cps.push_back(k.layout.cp);
    EXPECT_EQ(k.layout.dp * k.layout.cp, 4);
    EXPECT_NE(trainer_flags(k.layout, run).find(" --cp " + std::to_string(k.layout.cp) + " "),
              std::string::npos);
    EXPECT_NE(layout_name(k.layout).find(" cp" + std::to_string(k.layout.cp)), std::string::npos);
  }
  std::sort(cps.begin(), cps.end());
  EXPECT_EQ(cps, (std::vector<int>{1, 2}));  // cp 4 needs 8 chunks of 4 tokens
  bool chunks = false;
  for (const Rejected& r : plan.rejected)
    chunks |= r.cp == 4 && r.reason == "seq-len 4 is not divisible by 2 x cp (8 chunks)";
  EXPECT_TRUE(chunks);
  const Candidate& at1 = plan.fits[0].layout.cp == 1 ? plan.fits[0] : plan.fits[1];
  const Candidate& at2 = plan.fits[0].layout.cp == 2 ? plan.fits[0] : plan.fits[1];
  EXPECT_LT(at2.memory.activations, at1.memory.activations);
  // Pinned to cp 2 (tools/plan --cp 2, or an INI's cp = 2).
  one.cp = 2;
  for (const Candidate& k : make_plan(tiny(), run, c, {}, one).fits) EXPECT_EQ(k.layout.cp, 2);
}

// Sequence parallelism splits a rank's T/cp rows over tp (the Model's rule): T 12 at cp 2 is 6
// rows, which tp 2 splits and tp 4 does not (though tp 4 divides T).
TEST(Planner, SequenceParallelismSplitsTheChunkRows) {
  Cluster c = four_cpu_ranks();
  c.cores_per_node = c.ranks_per_node = 8;
  ModelConfig m = tiny();
  m.n_head = m.n_kv_head = 4;
  m.max_seq_len = 12;
  RunShape run = tiny_run();
  run.seq_len = 12;
  run.global_batch = 4;
  SearchLimits limits;
  limits.cp = 2, limits.pp = 1, limits.micro_batch = 1, limits.zero = 0;
  limits.recompute = Recompute::None;
  for (int tp : {2, 4}) {
    limits.tp = tp;
    int with = 0, without = 0;
    for (const Candidate& k : make_plan(m, run, c, {}, limits).fits)
      ++(k.layout.sequence_parallel ? with : without);
    EXPECT_EQ(without, 1) << "tp " << tp;
    EXPECT_EQ(with, tp == 2 ? 1 : 0) << "tp " << tp;
  }
}

TEST(Planner, OffersEveryZeroLevelWhereDpIsAboveOne) {
  Cluster c = four_cpu_ranks();
  RunShape run = tiny_run();
  run.global_batch = 8;
  SearchLimits limits;
  limits.dp = 4;  // tp1 pp1: micro-batches 1 and 2
  limits.recompute = Recompute::None;
  const Plan all = make_plan(tiny(), run, c, {}, limits);
  std::vector<std::string> labels;
  for (const Candidate& k : all.fits)
    if (k.layout.micro_batch == 2) labels.push_back(zero_label(k.layout));
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, (std::vector<std::string>{"0", "1", "2", "3", "3k"}));
  // --zero 3: the grids with dp 1 say why they have no option; --zero-shard-size 2 gives the
  // ZeRO-3 options of dp 4 their groups of 2.
  SearchLimits three;
  three.zero = 3;
  three.zero_shard = 2;
  const Plan z3 = make_plan(tiny(), run, c, {}, three);
  ASSERT_FALSE(z3.fits.empty());
  for (const Candidate& k : z3.fits) {
    EXPECT_EQ(k.layout.zero, 3);
    // 2 = the whole gradient group of dp 2 (or dp 1 x cp 2)
    EXPECT_EQ(k.layout.zero_shard, k.layout.grad_ranks() == 4 ? 2 : 0);
  }
  bool explained = false;
  for (const Rejected& r : z3.rejected) explained |= r.dp == 1 && r.reason == "zero 3 needs dp > 1";
  EXPECT_TRUE(explained);
  three.reshard_after_forward = false;
  for (const Candidate& k : make_plan(tiny(), run, c, {}, three).fits)
    EXPECT_FALSE(k.layout.reshard_after_forward);
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(PlannerInputs, ReadsTheTrainersIniAndCompletesTheModel) {
  const std::string ini = write_file("plan_model.ini",
                                     "arch = llama\nn-layer = 4\nn-head = 8\nn-kv-head = 0\n"
                                     "d-model = 96\nseq-len = 32\nglobal-batch-size = 16\n"
                                     "pp-schedule = gpipe\noptimizer = sgd\n");
  RunOverrides over;
  over.vocab_size = 300;
  over.global_batch = 64;
  const PlanInput in = read_plan_input(ini, over, false);
  EXPECT_EQ(in.model.n_kv_head, 8);
  EXPECT_EQ(in.model.d_ff, 256);  // 8/3 * 96 = 256, a multiple of 64
  EXPECT_EQ(in.model.max_seq_len, 32);
  EXPECT_EQ(in.model.vocab_size, 300);
  EXPECT_EQ(in.run.seq_len, 32);
  EXPECT_EQ(in.run.global_batch, 64);  // the flag wins over the file
  EXPECT_EQ(in.run.schedule, PipelineSchedule::GPipe);
  EXPECT_EQ(in.run.optimizer_states, 1);  // sgd: the momentum buffer
  EXPECT_EQ(in.cp, 0);  // not set: searched
  EXPECT_THROW(read_plan_input(ini, {}, false), UsageError);  // no vocabulary anywhere
  std::ofstream(ini, std::ios::app) << "cp = 2\n";
  EXPECT_EQ(read_plan_input(ini, over, false).cp, 2);  // set: the layout to plan
  EXPECT_THROW(read_plan_input(ini + ".missing", over, false), UsageError);
}

TEST(PlannerInputs, ClusterFile) {
  // Bandwidths in Gb/s, as links are sold: NVLink's 450 GB/s, 8 x 400 Gb/s InfiniBand.
  const std::string path = write_file("plan_cluster.ini",
                                      "name = x\nnodes = 2   # two\ngpus_per_node = 8\n"
                                      "memory_gb = 1024\nintra_node_gbps = 3600\n"
                                      "inter_node_gbps = 3200\ngpu_memory_gib = 80\n"
                                      "gpu_peak_tflops = 989\ntime_limit = 24:00:00\n"
                                      "setup = module load cuda\n");
  ClusterSpec spec;
  read_cluster_file(path, spec);
  EXPECT_FALSE(spec.cpu);
  const Cluster c = make_cluster(spec);
  EXPECT_EQ(c.world(), 16);
  EXPECT_DOUBLE_EQ(c.mem_bytes, 80.0 * (1 << 30));
  EXPECT_DOUBLE_EQ(c.peak_flops, 989e12);
  EXPECT_DOUBLE_EQ(c.intra_bw, 450e9);
  EXPECT_DOUBLE_EQ(c.inter_bw, 50e9);  // the node's 3200 Gb/s = 400 GB/s shared by its 8 GPUs
  EXPECT_TRUE(c.same_node(0, 7));
  EXPECT_FALSE(c.same_node(7, 8));
  ClusterSpec bad;
  EXPECT_THROW(read_cluster_file(write_file("plan_bad.ini", "nodes = many\n"), bad), UsageError);
  ClusterSpec no_peak = spec;
  no_peak.peak_tflops = 0;
  EXPECT_THROW(make_cluster(no_peak), UsageError);
}

}  // namespace
