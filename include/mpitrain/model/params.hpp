// Where every parameter lives in the model's one flat buffer.
//
// Order (so that a pipeline stage is a contiguous range and gradient buckets can be filled in
// reverse layer order):
//   wte (Vp, C), [wpe (maxT, C)]                                    embedding
//   for each layer l, "h.<l>.<slot>":                               blocks
//     gpt2:  ln1.weight (C), ln1.bias (C), attn.qkv.weight (3C, C), attn.qkv.bias (3C),
//            attn.proj.weight (C, C), attn.proj.bias (C), ln2.weight (C), ln2.bias (C),
//            mlp.fc.weight (F, C), mlp.fc.bias (F), mlp.proj.weight (C, F), mlp.proj.bias (C)
//     llama: ln1.weight (C), attn.qkv.weight ((NH+2NKV)hs, C), [attn.qkv.bias ((NH+2NKV)hs)],
//            attn.proj.weight (C, NH hs), [attn.proj.bias (C)], ln2.weight (C),
//            mlp.fc.weight (2F, C) = [gate; up], [mlp.fc.bias (2F)], mlp.proj.weight (C, F),
//            [mlp.proj.bias (C)]   (config: qkv_bias, proj_bias, mlp_bias; hs = head_size())
//     MoE layer (config.is_moe_layer(l), llama): mlp.fc / mlp.proj hold the shared experts
//            (width Fs = n_shared_experts x Fe; absent when 0), then moe.router.weight (E, C),
//            moe.experts.fc.weight (E, 2Fe, C) = each expert's [gate; up],
//            moe.experts.proj.weight (E, C, Fe)   (Fe = expert_width())
//     qk_norm (llama): then attn.q_norm.weight (hs), attn.k_norm.weight (hs)
//   lnf.weight (C), [lnf.bias (C)], [lm_head.weight (Vp, C) — unless tie_embeddings: wte then]
// Weights are (out, in) row-major. Norm weights and biases get no weight decay.
//
// A rank of a parallel run holds a shard (ModelShard): the layers of its pipeline stage (the
// embedding on the first stage; the final norm and the head on the last, and with tied
// embeddings a copy of wte there too, for the head) and, under tensor parallelism, its slice of
// each tensor:
//   column-parallel (split along the output rows): attn.qkv (its query heads' rows of q and its
//     kv heads' rows of k and v), mlp.fc (gpt2: rows of F; llama: rows of gate and of up), and
//     their biases; the vocabulary tables wte and lm_head (rows Vp/tp);
//   row-parallel (split along the input columns): attn.proj, mlp.proj;
//   replicated: norms, wpe, the biases of the row-parallel layers; the q/k norm weights too, though
//     each rank's heads add their part of their gradient (summed over tp, not averaged); the
//     router and the routed experts (whole on every tp rank).
// Under expert parallelism (ep > 1) the routed experts (moe.experts.fc / proj) are split along
// their first dimension over ep instead: ep rank e holds experts [e E/ep, (e+1) E/ep), whole and
// replicated over tp (ParamTensor::ep_split); the router stays whole.
// Each tensor records how its local rows/columns map into the full logical tensor (pieces).

#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpitrain/model/config.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"

namespace mpitrain {

enum class Slot {
  Wte, Wpe,                                         // embedding
  Ln1W, Ln1B, QkvW, QkvB, ProjW, ProjB,             // attention half of a block
  Ln2W, Ln2B, FcW, FcB, FcProjW, FcProjB,           // MLP half of a block
  QNormW, KNormW,                                   // qk_norm's per-head q/k RMSNorm (hs each)
  RouterW, ExpertFcW, ExpertProjW,                  // an MoE layer's router and routed experts
  SharedGateW,                                      // and its shared experts' gate (C)
  LnfW, LnfB, LmHead,                               // head
};

// What one rank holds of the model. The default is the whole model.
struct ModelShard {
  int tp = 1, tp_rank = 0;               // tensor-parallel size and this rank's index
  int layer_begin = 0, layer_end = -1;   // this stage's blocks [begin, end); -1 = all
  bool first_stage = true, last_stage = true;
  int ep = 1, ep_rank = 0;               // expert-parallel size and this rank's index (last:
                                         // the tests' positional {tp, tp_rank, begin, end, ...})
};

// A contiguous run of the split dimension: local [local_start, +length) is global
// [global_start, +length).
struct ShardPiece {
  int64_t global_start, local_start, length;
};

struct ParamTensor {
  std::string name;                   // "wte", "h.3.attn.qkv.weight", ...
  Slot slot;
  int layer;                          // block index, -1 outside the blocks
  std::vector<int64_t> shape;         // this rank's (local) shape
  std::vector<int64_t> global_shape;  // the full logical shape
  int split_dim;                      // dimension split over tp (or ep); -1 = replicated
  std::vector<ShardPiece> pieces;     // along split_dim (empty when replicated)
  size_t offset;                      // into the flat buffer
  size_t numel;                       // local elements
  bool decay;                         // weight decay applies (matrices and embeddings only)
  int global_index;                   // position in the whole model's tensor list
  // This rank's copy is the one that counts once for the global grad norm and for gathering:
  // false for replicated tensors on tp ranks > 0 and for the tied wte copy on the last stage.
  bool primary;
  int unit = -1;  // index into ParamLayout::units()
  // A routed expert tensor under ep > 1: split_dim 0 and pieces are over ep (this rank's
  // experts), and the tensor is replicated over tp; its gradients go over the expert-dp group.
  bool ep_split = false;
  bool tp_replicated() const { return split_dim < 0 || ep_split; }
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config, const ModelShard& shard = {});

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t total() const { return total_; }
  bool has(Slot slot, int layer = -1) const;
  // The tensor the last stage's head multiplies by: lm_head, or the tied wte.
  Slot head_slot() const { return has(Slot::LmHead) ? Slot::LmHead : Slot::Wte; }
  // Offset of a tensor in the flat buffer; Error if the architecture has no such tensor.
  size_t offset(Slot slot, int layer = -1) const;
  const ParamTensor& find(const std::string& name) const;  // Error if absent
  const ModelShard& shard() const { return shard_; }
  // The units ZeRO-2/3 gather and reduce-scatter whole, in flat order, each a contiguous range:
  // every block is one; outside the blocks, wte, wpe, the final norm (weight and bias) and
  // lm_head are one each (wte alone, so that its tied copy on the last stage is cut into the same
  // pieces as the first stage's).
  const std::vector<FlatRange>& units() const { return units_; }
  int unit_of(Slot slot, int layer = -1) const;  // the unit of a tensor this shard holds
  // Parameters of the WHOLE model (whatever this shard holds) that take part in matrix products
  // (all but the embedding lookups wte/wpe, with the output head counted whether tied or not):
  // the N of the MFU formula.
  size_t matmul_params() const;

 private:
  ModelShard shard_;
  std::vector<ParamTensor> tensors_;
  std::vector<int> index_;  // (slot, layer) -> position in tensors_, -1 if absent
  std::vector<FlatRange> units_;
  int n_layer_;
  size_t total_ = 0;
  size_t matmul_params_ = 0;
  int key(Slot slot, int layer) const;
};

// The flat ranges of the ep-split expert tensors (ParamTensor::ep_split), ascending: the
// gradients that go over the expert-data-parallel group.
std::vector<FlatRange> expert_ranges(const ParamLayout& layout);

// Calls run(full-tensor index, local index, count) for each contiguous run of t's local data
// within the full logical tensor (global_shape, row-major).
void for_each_run(const ParamTensor& t,
                  const std::function<void(uint64_t, uint64_t, uint64_t)>& run);

// Moves values between a full logical tensor (global_shape, row-major) and this rank's part.
template <typename T>
void take_shard(const ParamTensor& t, const T* global, T* local);  // global -> local
template <typename T>
void put_shard(const ParamTensor& t, const T* local, T* global);   // local -> global

}  // namespace mpitrain
