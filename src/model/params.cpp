#include "mpitrain/model/params.hpp"

#include <algorithm>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr int kBlockSlots = static_cast<int>(Slot::SharedGateW) - static_cast<int>(Slot::Ln1W) + 1;
constexpr int kSlots = static_cast<int>(Slot::LmHead) + 1;

const char* slot_name(Slot slot) {
  switch (slot) {
    case Slot::Wte: return "wte";
    case Slot::Wpe: return "wpe";
    case Slot::Ln1W: return "ln1.weight";
    case Slot::Ln1B: return "ln1.bias";
    case Slot::QkvW: return "attn.qkv.weight";
    case Slot::QkvB: return "attn.qkv.bias";
    case Slot::ProjW: return "attn.proj.weight";
    case Slot::ProjB: return "attn.proj.bias";
    case Slot::Ln2W: return "ln2.weight";
    case Slot::Ln2B: return "ln2.bias";
    case Slot::FcW: return "mlp.fc.weight";
    case Slot::FcB: return "mlp.fc.bias";
    case Slot::FcProjW: return "mlp.proj.weight";
    case Slot::FcProjB: return "mlp.proj.bias";
    case Slot::QNormW: return "attn.q_norm.weight";
    case Slot::KNormW: return "attn.k_norm.weight";
    case Slot::RouterW: return "moe.router.weight";
    case Slot::ExpertFcW: return "moe.experts.fc.weight";
    case Slot::ExpertProjW: return "moe.experts.proj.weight";
    case Slot::SharedGateW: return "moe.shared_gate.weight";
    case Slot::LnfW: return "lnf.weight";
    case Slot::LnfB: return "lnf.bias";
    case Slot::LmHead: return "lm_head.weight";
  }
  return "?";
}

bool is_block_slot(Slot slot) { return slot >= Slot::Ln1W && slot <= Slot::SharedGateW; }

}  // namespace

int ParamLayout::key(Slot slot, int layer) const {
  if (is_block_slot(slot)) {
    if (layer < 0 || layer >= n_layer_) return -1;
    return static_cast<int>(Slot::Wpe) + 1 + layer * kBlockSlots +
           (static_cast<int>(slot) - static_cast<int>(Slot::Ln1W));
  }
  if (layer != -1) return -1;
  int s = static_cast<int>(slot);
  return s < static_cast<int>(Slot::Ln1W) ? s : s - kBlockSlots + n_layer_ * kBlockSlots;
}

ParamLayout::ParamLayout(const ModelConfig& cfg, const ModelShard& shard)
    : shard_(shard), n_layer_(cfg.n_layer) {
  if (shard_.layer_end < 0) shard_.layer_end = cfg.n_layer;
  index_.assign(kSlots - kBlockSlots + n_layer_ * kBlockSlots, -1);
  const int64_t tp = shard_.tp, r = shard_.tp_rank;
  const int64_t C = cfg.d_model, Vp = cfg.padded_vocab(), hs = cfg.head_size();
  const int64_t E = cfg.n_experts, Fe = cfg.expert_width();
  const int64_t NH = cfg.n_head, NKV = cfg.n_kv_head, A = NH * hs;
  const int64_t qh = NH / tp * hs, kvh = NKV / tp * hs, Vl = Vp / tp;
  const bool llama = cfg.arch == Arch::Llama, norm_bias = !llama, tied = cfg.tie_embeddings;

  // This rank's pieces of each kind of split (see the header).
  const std::vector<ShardPiece> vocab_rows = {{r * Vl, 0, Vl}};
  const std::vector<ShardPiece> qkv_rows = {{r * qh, 0, qh},
                                            {A + r * kvh, qh, kvh},
                                            {A + NKV * hs + r * kvh, qh + kvh, kvh}};
  const std::vector<ShardPiece> head_cols = {{r * qh, 0, qh}};
  if (shard_.ep > 1 && E % shard_.ep != 0)
    MPITRAIN_THROW(std::to_string(E) + " experts do not split over ep " + std::to_string(shard_.ep));
  const int64_t El = shard_.ep > 1 ? E / shard_.ep : E;
  const std::vector<ShardPiece> ep_experts = {{shard_.ep_rank * El, 0, El}};

  int global_index = 0;  // counts every tensor of the whole model, held here or not
  // One tensor of the whole model, in canonical order; kept if this shard holds it.
  // matmul: the fraction of it a token's products use (the routed experts: top_k / E), 0 none.
  auto add = [&](Slot slot, int layer, std::vector<int64_t> global_shape, bool decay,
                 double matmul, bool held, int split_dim, const std::vector<ShardPiece>& pieces) {
    const int gi = global_index++;
    size_t global_numel = 1;
    for (int64_t d : global_shape) global_numel *= static_cast<size_t>(d);
    matmul_params_ += static_cast<size_t>(static_cast<double>(global_numel) * matmul);
    if (!held) return;
    std::vector<int64_t> shape = global_shape;
    if (split_dim >= 0) {
      shape[split_dim] = 0;
      for (const ShardPiece& p : pieces) shape[split_dim] += p.length;
    }
    size_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<size_t>(d);
    const bool tied_copy = slot == Slot::Wte && !shard_.first_stage;
    const bool ep_split = (slot == Slot::ExpertFcW || slot == Slot::ExpertProjW) && split_dim >= 0;
    const bool primary = split_dim >= 0 && !ep_split ? !tied_copy : r == 0;
    std::string name = is_block_slot(slot) ? "h." + std::to_string(layer) + "." + slot_name(slot)
                                           : slot_name(slot);
    index_[key(slot, layer)] = static_cast<int>(tensors_.size());
    tensors_.push_back({std::move(name), slot, layer, std::move(shape), std::move(global_shape),
                        split_dim, split_dim >= 0 ? pieces : std::vector<ShardPiece>{}, total_,
                        numel, decay, gi, primary, -1, ep_split});
    total_ += numel;
  };
  const std::vector<ShardPiece> none;

  const bool first = shard_.first_stage, last = shard_.last_stage;
  add(Slot::Wte, -1, {Vp, C}, true, tied, first || (last && tied), 0, vocab_rows);
  if (!llama) add(Slot::Wpe, -1, {cfg.max_seq_len, C}, true, false, first, -1, none);
  for (int l = 0; l < cfg.n_layer; ++l) {
    const bool held = l >= shard_.layer_begin && l < shard_.layer_end;
    add(Slot::Ln1W, l, {C}, false, true, held, -1, none);
    if (norm_bias) add(Slot::Ln1B, l, {C}, false, true, held, -1, none);
    add(Slot::QkvW, l, {cfg.qkv_width(), C}, true, true, held, 0, qkv_rows);
    if (cfg.qkv_bias) add(Slot::QkvB, l, {cfg.qkv_width()}, false, true, held, 0, qkv_rows);
    add(Slot::ProjW, l, {C, A}, true, true, held, 1, head_cols);
    if (cfg.proj_bias) add(Slot::ProjB, l, {C}, false, true, held, -1, none);
    add(Slot::Ln2W, l, {C}, false, true, held, -1, none);
    if (norm_bias) add(Slot::Ln2B, l, {C}, false, true, held, -1, none);
    const int64_t F = cfg.dense_mlp_width(l), Fl = F / tp;  // an MoE layer: the shared experts'
    if (F > 0) {
      const int64_t FC = llama ? 2 * F : F;  // llama: [gate; up]
      const std::vector<ShardPiece> ff_rows = {{r * Fl, 0, Fl}};
      const std::vector<ShardPiece> fc_rows =
          llama ? std::vector<ShardPiece>{{r * Fl, 0, Fl}, {F + r * Fl, Fl, Fl}} : ff_rows;
      add(Slot::FcW, l, {FC, C}, true, true, held, 0, fc_rows);
      if (cfg.mlp_bias) add(Slot::FcB, l, {FC}, false, true, held, 0, fc_rows);
      add(Slot::FcProjW, l, {C, F}, true, true, held, 1, ff_rows);
      if (cfg.mlp_bias) add(Slot::FcProjB, l, {C}, false, true, held, -1, none);
    }
    if (cfg.is_moe_layer(l)) {  // router and routed experts: whole on every tp rank
      const double active = static_cast<double>(cfg.top_k) / static_cast<double>(E);
      const int experts_split = shard_.ep > 1 ? 0 : -1;  // this ep rank's experts
      add(Slot::RouterW, l, {E, C}, true, true, held, -1, none);
      add(Slot::ExpertFcW, l, {E, 2 * Fe, C}, true, active, held, experts_split, ep_experts);
      add(Slot::ExpertProjW, l, {E, C, Fe}, true, active, held, experts_split, ep_experts);
      if (cfg.moe_shared_gate) add(Slot::SharedGateW, l, {1, C}, true, true, held, -1, none);
    }
    if (cfg.qk_norm) {  // per-head q/k RMSNorm weights: replicated over tp, no weight decay
      add(Slot::QNormW, l, {hs}, false, true, held, -1, none);
      add(Slot::KNormW, l, {hs}, false, true, held, -1, none);
    }
  }
  add(Slot::LnfW, -1, {C}, false, true, last, -1, none);
  if (norm_bias) add(Slot::LnfB, -1, {C}, false, true, last, -1, none);
  if (!tied) add(Slot::LmHead, -1, {Vp, C}, true, true, last, 0, vocab_rows);
  // Units: a block, or one tensor outside the blocks (the final norm's bias joins its weight).
  for (size_t k = 0; k < tensors_.size(); ++k) {
    const ParamTensor& t = tensors_[k];
    const bool joins = k > 0 && (t.layer >= 0 ? t.layer == tensors_[k - 1].layer
                                              : t.slot == Slot::LnfB);
    if (!joins) units_.push_back({t.offset, t.offset});
    units_.back().hi = t.offset + t.numel;
    tensors_[k].unit = static_cast<int>(units_.size()) - 1;
  }
}

int ParamLayout::unit_of(Slot slot, int layer) const {
  if (!has(slot, layer))
    MPITRAIN_THROW(std::string("no parameter ") + slot_name(slot) + " in layer " +
                   std::to_string(layer));
  return tensors_[index_[key(slot, layer)]].unit;
}

bool ParamLayout::has(Slot slot, int layer) const {
  int k = key(slot, layer);
  return k >= 0 && index_[k] >= 0;
}

size_t ParamLayout::offset(Slot slot, int layer) const {
  if (!has(slot, layer))
    MPITRAIN_THROW(std::string("no parameter ") + slot_name(slot) + " in layer " +
                   std::to_string(layer));
  return tensors_[index_[key(slot, layer)]].offset;
}

const ParamTensor& ParamLayout::find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return t;
  MPITRAIN_THROW("no parameter named '" + name + "'");
}

size_t ParamLayout::matmul_params() const { return matmul_params_; }

void for_each_run(const ParamTensor& t,
                  const std::function<void(uint64_t, uint64_t, uint64_t)>& run) {
  if (t.split_dim < 0) return run(0, 0, t.numel);
  uint64_t inner = 1;  // elements per index of the split dimension (the dimensions after it)
  for (size_t d = t.split_dim + 1; d < t.global_shape.size(); ++d) inner *= t.global_shape[d];
  uint64_t outer = 1;  // index combinations of the dimensions before it
  for (int d = 0; d < t.split_dim; ++d) outer *= t.global_shape[d];
  const uint64_t global_span = t.global_shape[t.split_dim] * inner;
  const uint64_t local_span = t.shape[t.split_dim] * inner;
  for (uint64_t o = 0; o < outer; ++o)
    for (const ShardPiece& p : t.pieces)
      run(o * global_span + p.global_start * inner, o * local_span + p.local_start * inner,
          p.length * inner);
}

template <typename T>
void take_shard(const ParamTensor& t, const T* global, T* local) {
  for_each_run(t, [&](uint64_t g, uint64_t l, uint64_t n) {
    std::copy(global + g, global + g + n, local + l);
  });
}

template <typename T>
void put_shard(const ParamTensor& t, const T* local, T* global) {
  for_each_run(t, [&](uint64_t g, uint64_t l, uint64_t n) {
    std::copy(local + l, local + l + n, global + g);
  });
}

template void take_shard(const ParamTensor&, const float*, float*);
template void take_shard(const ParamTensor&, const double*, double*);
template void put_shard(const ParamTensor&, const float*, float*);
template void put_shard(const ParamTensor&, const double*, double*);

std::vector<FlatRange> expert_ranges(const ParamLayout& layout) {
  std::vector<FlatRange> ranges;
  for (const ParamTensor& t : layout.tensors())
    if (t.ep_split) ranges.push_back({t.offset, t.offset + t.numel});
  return ranges;
}

}  // namespace mpitrain
