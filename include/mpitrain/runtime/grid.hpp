// The parallel grid: the one place that knows how world ranks map to (dp, tp, pp, cp)
// coordinates and which process groups exist.
//
// Ranks are ordered tp fastest, then cp, then dp, then pp (Megatron-Core's order, so that a
// tensor-parallel group sits inside one node and a context-parallel group next to it):
//   world rank = tp + TP * (cp + CP * (dp + DP * pp)).
// Context parallelism (cp) splits each sequence over CP ranks inside data parallelism: the
// samples are split over dp only, but the parameters are replicated over dp x cp, so gradients
// (the bucket sync, ZeRO's shard and replica groups) go over the dp-cp group (Megatron's
// get_data_parallel_group(with_context_parallel=True)). Without cp (CP = 1) it is the dp group.
//
// Worked example, 16 ranks, TP = 2, PP = 4 (so DP = 2):
//   tp groups   [0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]
//   dp groups   [0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]
//   pp groups   [0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]
//   model-parallel groups (tp x pp, one per dp rank)   [0,1,4,5,8,9,12,13] [2,3,6,7,10,11,14,15]
//   embedding groups (first and last stage of each pp group)   [0,12] [1,13] [2,14] [3,15]
// Middle stages (pp 1 and 2 above) belong to no embedding group.
// Hybrid sharding (ZeRO-2/3 with shard size D < DP, FSDP's HSDP) cuts each dp group in two ways:
// shard groups of D consecutive dp ranks (the units are split over them) and replica groups of
// the dp ranks at the same place in their shard group (they hold the same pieces). With DP = 4,
// D = 2, TP = PP = 1: dp group [0,1,2,3]; shard groups [0,1] [2,3]; replica groups [0,2] [1,3].
// Without hybrid sharding (D = 0 or DP) the shard group is the dp group and replicas are alone.
// With cp these cut the dp-cp group (D divides DP x CP; its rank order is cp + CP * dp).
// Worked example with cp, 8 ranks, TP = 2, CP = 2, DP = 2, PP = 1:
//   tp groups   [0,1] [2,3] [4,5] [6,7]
//   cp groups   [0,2] [1,3] [4,6] [5,7]
//   dp groups   [0,4] [1,5] [2,6] [3,7]          (the samples: dp rank 0 holds ranks 0-3)
//   dp-cp groups   [0,2,4,6] [1,3,5,7]            (the gradients)
//   model-parallel groups   [0,1] [2,3] [4,5] [6,7]
//   with D = 2: shard groups [0,2] [4,6] [1,3] [5,7], replica groups [0,4] [2,6] [1,5] [3,7].
// Expert parallelism (EP, Megatron-Core's placement) carves the dp group: an ep group is EP
// consecutive dp ranks (they split the routed experts, E/EP each, and exchange tokens), and the
// expert-dp group is the DP/EP dp ranks at the same place in their ep group, with every cp rank
// of theirs (they hold the same experts, so the expert gradients are reduced over it; the rest
// still over dp-cp). EP divides DP. With cp an ep group holds one cp rank's chunks of its dp
// ranks' sequences: their tokens reach the experts inside it, never across cp.
// Worked example with ep, 8 ranks, TP = 2, EP = 2, DP = 4, PP = 1:
//   dp groups   [0,2,4,6] [1,3,5,7]
//   ep groups   [0,2] [4,6] [1,3] [5,7]           (dp ranks 0-1 and 2-3 split the experts)
//   expert-dp groups   [0,4] [2,6] [1,5] [3,7]    (experts 0..E/2-1 on 0,4; E/2.. on 2,6)
// Worked example with ep and cp, 8 ranks, TP = 1, CP = 2, EP = 2, DP = 4, PP = 1:
//   dp groups   [0,2,4,6] [1,3,5,7]               (rank = cp + 2 dp)
//   ep groups   [0,2] [4,6] [1,3] [5,7]
//   expert-dp groups   [0,1,4,5] [2,3,6,7]        (rank order cp + CP x (dp / EP))
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

struct GridShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int cp = 1;
  int ep = 1;  // expert parallelism: divides dp, not in size() (it carves the dp ranks)
  int size() const { return dp * tp * pp * cp; }
};

// Completes a shape whose entries may be 0 ("derive from the world size"). One entry 0: it is
// world / (product of the others). Several: tp defaults to 1, then pp (unless dp is given, in
// which case pp is derived), and the one left is derived. UsageError if the ranks do not fit,
// naming rank counts that would and each value the user set changed alone so that it fits
// ("... does not fit the 3 ranks of this job: use -np 2, 4, 6 ... or --tp 1 / --tp 3"); a
// changed value is named only where `admits` (when given) accepts the whole shape it makes:
// the layouts the model can run (a 4-head model: not --tp 3).
using LayoutFilter = std::function<bool(const GridShape&)>;
// cp (>= 1) is fixed: the others fit world_size / cp ranks.
GridShape resolve_grid(int world_size, int dp, int tp, int pp, const LayoutFilter& admits = {},
                       int cp = 1);

enum class Group { Tp, Dp, Pp, ModelParallel, Embedding, DpShard, DpReplica, Cp, DpCp, Ep, ExpertDp };

class Grid {
 public:
  // shard_size: hybrid sharding's D (0 = none); UsageError unless it divides dp x cp, or when
  // shape.ep does not divide dp.
  Grid(const MpiComm& world, GridShape shape, int shard_size = 0);

  const GridShape& shape() const { return shape_; }
  int dp_rank() const { return dp_rank_; }
  int tp_rank() const { return tp_rank_; }
  int pp_rank() const { return pp_rank_; }
  int cp_rank() const { return cp_rank_; }
  int ep_rank() const { return dp_rank_ % shape_.ep; }  // which E/EP experts this rank holds
  // Rank in the dp-cp (gradient) group: cp + CP * dp.
  int dp_cp_rank() const { return cp_rank_ + shape_.cp * dp_rank_; }
  bool first_stage() const { return pp_rank_ == 0; }
  bool last_stage() const { return pp_rank_ == shape_.pp - 1; }
  int local_rank() const { return local_rank_; }  // rank within the node, for device choice
  int local_size() const { return local_size_; }  // ranks on this node

  const MpiComm& tp() const { return tp_; }
  const MpiComm& dp() const { return dp_; }
  const MpiComm& pp() const { return pp_; }
  const MpiComm& cp() const { return cp_; }
  const MpiComm& dp_cp() const { return dp_cp_; }  // the gradients' group (dp with cp = 1)
  const MpiComm& model_parallel() const { return mp_; }
  const MpiComm& dp_shard() const { return dp_shard_; }
  const MpiComm& dp_replica() const { return dp_replica_; }
  const MpiComm& ep() const { return ep_; }                // the token exchange
  const MpiComm& expert_dp() const { return expert_dp_; }  // the expert gradients' group
  int shard_size() const { return shard_size_; }  // D: dp x cp without hybrid sharding
  // First and last stage of this rank's pipeline; empty on middle stages.
  const std::optional<MpiComm>& embedding() const { return embedding_; }

  // World ranks of the group `g` that world rank `rank` belongs to, in group rank order (empty:
  // no such group, i.e. the embedding group of a middle stage). Pure arithmetic.
  static std::vector<int> members(const GridShape& shape, Group g, int rank, int shard_size = 0);
  static int world_rank(const GridShape& shape, int dp, int tp, int pp, int cp = 0) {
    return tp + shape.tp * (cp + shape.cp * (dp + shape.dp * pp));
  }

 private:
  GridShape shape_;
  int shard_size_;
  int dp_rank_, tp_rank_, pp_rank_, cp_rank_, local_rank_, local_size_;
  MpiComm tp_, dp_, pp_, cp_, dp_cp_, mp_, dp_shard_, dp_replica_, ep_, expert_dp_;
  std::optional<MpiComm> embedding_;
};

}  // namespace mpitrain
