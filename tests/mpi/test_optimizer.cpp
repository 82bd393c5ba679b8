// ranks: 2 4
// The optimizer under every dp x tp x pp layout of the world, with ZeRO ranges and without: each
// element ends as the single-rank optimizer leaves it. AdamW and SGD are elementwise and bit for
// bit; LAMB's per-tensor norms are summed over the dp ranges and the tp shards, so only the order
// of those double sums differs (a 1-ulp change in a trust ratio at most). Both copies of the tied
// wte (gpt2, pp > 1) stay bit-identical.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/train/gather.hpp"
#include "random_values.hpp"

using namespace mpitrain;
using mpitrain::test_inputs::random_floats;

namespace {

const MpiComm& world() {
  static const MpiComm w = MpiComm::world();
  return w;
}

// gpt2 (tied wte) that splits over tp 1, 2, 4 and pp 1, 2; widths no multiple of 16 floats.
ModelConfig small_model() {
  ModelConfig c;
  c.arch = Arch::Gpt2;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 4;
  c.d_model = 24;
  c.d_ff = 40;
  c.vocab_size = 20;
  c.max_seq_len = 6;
  return c;
}

// Every grid shape of exactly `size` ranks the model splits into.
std::vector<GridShape> shapes_of(const ModelConfig& c, int size) {
  std::vector<GridShape> out;
  for (int tp = 1; tp <= size; ++tp)
    for (int pp = 1; pp <= c.n_layer; ++pp)
      if (size % (tp * pp) == 0 && c.n_head % tp == 0 && c.d_ff % tp == 0 &&
          c.padded_vocab() % tp == 0)
        out.push_back(GridShape{size / (tp * pp), tp, pp});
  return out;
}

constexpr int kSteps = 3;
constexpr float kLr = 1e-2f, kGradScale = 0.5f;

// This rank's part of the full-layout buffer `full`.
std::vector<float> local_part(const ParamLayout& layout, const ParamLayout& whole,
                              const std::vector<float>& full) {
  std::vector<float> local(layout.total());
  for (const ParamTensor& t : layout.tensors())
    take_shard(t, full.data() + whole.tensors()[t.global_index].offset, local.data() + t.offset);
  return local;
}

// kSteps of `kind` on the whole model, on one rank: what every layout must reproduce.
std::vector<float> single_rank_result(const ModelConfig& cfg, OptimizerKind kind) {
  const ParamLayout whole(cfg);
  std::vector<float> params = random_floats(whole.total(), 1);
  CpuBackend<float> backend(1);
  OptimizerConfig oc;
  oc.kind = kind;
  Optimizer opt(backend, whole, oc, params.data(), ShardRanges::whole(whole.total()),
                Precision::Fp32);
  for (int t = 1; t <= kSteps; ++t)
    opt.step(random_floats(whole.total(), 100 + t).data(), kLr, kGradScale);
  return params;
}

struct Outcome {
  int64_t compared = 0, differing = 0;  // elements of the ranges; those not bit-identical
  double worst = 0.0;                   // largest |difference|
  bool tied_copies_equal = true;
};

// What a dp rank owns: all (zero 0); one range cut at arbitrary points, not at tensors nor vectors
// (zero 1); its zero_range piece of every unit (zero 3, as ZeRO-2/3 shard).
ShardRanges owned_by(const ParamLayout& layout, int dp, int rank, int zero) {
  const size_t n = layout.total();
  if (zero == 0) return ShardRanges::whole(n);
  if (zero == 1) return ShardRanges({{n * rank / dp, n * (rank + 1) / dp}});
  std::vector<FlatRange> pieces;
  for (const FlatRange& u : layout.units()) {
    const FlatRange p = zero_range(u.size(), dp, rank);
    pieces.push_back({u.lo + p.lo, u.lo + p.hi});
  }
  return ShardRanges(pieces);
}

std::vector<float> compact_of(const std::vector<float>& flat, const ShardRanges& owned) {
  std::vector<float> out;
  for (const FlatRange& r : owned.ranges())
    out.insert(out.end(), flat.data() + r.lo, flat.data() + r.hi);
  return out;
}

bool holds(const ShardRanges& owned, size_t i) { return owned.overlap(i, i + 1).size() == 1; }

// kSteps of `kind` on this rank's shard of `shape`, the part its dp rank owns (owned_by), against
// the single-rank result.
Outcome run_layout(const ModelConfig& cfg, const GridShape& shape, int zero, OptimizerKind kind,
                   const std::vector<float>& expected_full) {
  const Grid grid(world(), shape);
  const ParamLayout whole(cfg);
  const ParamLayout layout(cfg, shard_of(shape, pipeline_layer_split(cfg.n_layer, shape.pp, ""),
                                         grid.tp_rank(), grid.pp_rank()));
  const size_t n = layout.total();
  const ShardRanges owned = owned_by(layout, shape.dp, grid.dp_rank(), zero);
  MpiCommunicator dp(grid.dp().get()), tp(grid.tp().get());
  std::optional<MpiCommunicator> emb;
  if (grid.embedding() && shape.pp > 1 && layout.has(Slot::Wte))
    emb.emplace(grid.embedding()->get());
  NormGroups groups{zero ? &dp : nullptr, &tp, emb ? &*emb : nullptr};

  std::vector<float> params = local_part(layout, whole, random_floats(whole.total(), 1));
  CpuBackend<float> backend(1);
  OptimizerConfig oc;
  oc.kind = kind;
  std::vector<float> held = compact_of(params, owned);
  Optimizer opt(backend, layout, oc, held.data(), owned, Precision::Fp32, groups);
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> grads =
        local_part(layout, whole, random_floats(whole.total(), 100 + t));
    opt.step(compact_of(grads, owned).data(), kLr, kGradScale);
  }
  for (size_t k = 0; k < owned.ranges().size(); ++k) {  // back to their flat places
    const FlatRange& r = owned.ranges()[k];
    std::copy(held.begin() + owned.at(k), held.begin() + owned.at(k) + r.size(), params.data() + r.lo);
  }

  Outcome out;
  const std::vector<float> expected = local_part(layout, whole, expected_full);
  for (size_t i = 0; i < n; ++i) {
    if (!holds(owned, i)) continue;
    ++out.compared;
    out.differing += std::memcmp(&params[i], &expected[i], 4) != 0;
    out.worst = std::max(out.worst, static_cast<double>(std::abs(params[i] - expected[i])));
  }
  // Both stages' copies of wte, assembled from the ranges (each element from one rank).
  const ParamTensor& wte_whole = whole.find("wte");
  std::vector<float> copies(2 * wte_whole.numel, 0.0f);  // [first stage | last stage]
  if (layout.has(Slot::Wte) && (grid.first_stage() || grid.last_stage())) {
    const ParamTensor& w = layout.find("wte");
    float* copy = copies.data() + (grid.first_stage() ? 0 : wte_whole.numel);
    for_each_run(w, [&](uint64_t global, uint64_t local, uint64_t count) {
      for (uint64_t k = 0; k < count; ++k)
        if (holds(owned, w.offset + local + k))
          copy[global + k] = params[w.offset + local + k];
    });
  }
  MPI_Allreduce(MPI_IN_PLACE, copies.data(), static_cast<int>(copies.size()), MPI_FLOAT, MPI_SUM,
                world().get());
  if (shape.pp > 1)
    out.tied_copies_equal =
        std::memcmp(copies.data(), copies.data() + wte_whole.numel, wte_whole.numel * 4) == 0;
  // Totals over the world.
  int64_t counts[2] = {out.compared, out.differing};
  MPI_Allreduce(MPI_IN_PLACE, counts, 2, MPI_INT64_T, MPI_SUM, world().get());
  out.compared = counts[0], out.differing = counts[1];
  MPI_Allreduce(MPI_IN_PLACE, &out.worst, 1, MPI_DOUBLE, MPI_MAX, world().get());
  return out;
}

std::string name(const GridShape& s, int zero) {
  return "dp" + std::to_string(s.dp) + " tp" + std::to_string(s.tp) + " pp" + std::to_string(s.pp) +
         (zero ? " zero " + std::to_string(zero) : "");
}

}  // namespace

// AdamW and SGD: every layout, every element bit-identical.
TEST(OptimizerLayouts, ElementwiseKindsAreBitIdenticalUnderEveryLayout) {
  const ModelConfig cfg = small_model();
  for (OptimizerKind kind : {OptimizerKind::AdamW, OptimizerKind::Sgd}) {
    const std::vector<float> expected = single_rank_result(cfg, kind);
    for (const GridShape& shape : shapes_of(cfg, world().size()))
      for (int zero : {0, 1, 3}) {
        const Outcome o = run_layout(cfg, shape, zero, kind, expected);
        const int64_t held = static_cast<int64_t>(ParamLayout(cfg).total());
        EXPECT_GE(o.compared, held) << to_string(kind) << " " << name(shape, zero);
        EXPECT_EQ(o.differing, 0) << to_string(kind) << " " << name(shape, zero);
        EXPECT_TRUE(o.tied_copies_equal) << to_string(kind) << " " << name(shape, zero);
      }
  }
}

// LAMB: the trust ratios are the whole tensors' under every layout (a norm over a part would
// change updates by a factor ~sqrt(parts), far beyond the tolerance). Tolerance 2.5e-7: the
// layouts change only the summation order of the norms (double, ~1e-16 relative), which can move
// a float trust ratio by 1 ulp (6e-8 relative of an update of size ~lr) and a parameter (|p| < 2)
// by at most an ulp or two of its value (<= 2.4e-7) over the 3 steps.
TEST(OptimizerLayouts, LambUsesWholeTensorNormsUnderEveryLayout) {
  const ModelConfig cfg = small_model();
  const std::vector<float> expected = single_rank_result(cfg, OptimizerKind::Lamb);
  for (const GridShape& shape : shapes_of(cfg, world().size()))
    for (int zero : {0, 1, 3}) {
      const Outcome o = run_layout(cfg, shape, zero, OptimizerKind::Lamb, expected);
      EXPECT_LE(o.worst, 2.5e-7) << name(shape, zero);
      EXPECT_TRUE(o.tied_copies_equal) << name(shape, zero);
      if (world().rank() == 0)
        std::printf("lamb %-18s %lld of %lld elements not bit-identical, largest difference %.3g\n",
                    name(shape, zero).c_str(), static_cast<long long>(o.differing),
                    static_cast<long long>(o.compared), o.worst);
    }
}
