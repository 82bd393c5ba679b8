#include "mpitrain/model/params.hpp"

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr int kBlockSlots = static_cast<int>(Slot::FcProjB) - static_cast<int>(Slot::Ln1W) + 1;
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
    case Slot::LnfW: return "lnf.weight";
    case Slot::LnfB: return "lnf.bias";
    case Slot::LmHead: return "lm_head.weight";
  }
  return "?";
}

bool is_block_slot(Slot slot) { return slot >= Slot::Ln1W && slot <= Slot::FcProjB; }

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

ParamLayout::ParamLayout(const ModelConfig& cfg) : n_layer_(cfg.n_layer) {
  index_.assign(kSlots - kBlockSlots + n_layer_ * kBlockSlots, -1);
  const int64_t C = cfg.d_model, F = cfg.d_ff, Vp = cfg.padded_vocab();
  const int64_t attn = static_cast<int64_t>(cfg.n_head) * cfg.head_size();
  const bool bias = cfg.has_biases();
  auto add = [&](Slot slot, int layer, std::vector<int64_t> shape, bool decay, bool matmul) {
    size_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<size_t>(d);
    std::string name = is_block_slot(slot) ? "h." + std::to_string(layer) + "." + slot_name(slot)
                                           : slot_name(slot);
    index_[key(slot, layer)] = static_cast<int>(tensors_.size());
    tensors_.push_back({name, slot, layer, std::move(shape), total_, numel, decay});
    total_ += numel;
    if (matmul) matmul_params_ += numel;
  };

  add(Slot::Wte, -1, {Vp, C}, true, cfg.tied_embeddings());  // the tied head is a matmul
  if (cfg.arch == Arch::Gpt2) add(Slot::Wpe, -1, {cfg.max_seq_len, C}, true, false);
  for (int l = 0; l < cfg.n_layer; ++l) {
    add(Slot::Ln1W, l, {C}, false, true);
    if (bias) add(Slot::Ln1B, l, {C}, false, true);
    add(Slot::QkvW, l, {cfg.qkv_width(), C}, true, true);
    if (bias) add(Slot::QkvB, l, {cfg.qkv_width()}, false, true);
    add(Slot::ProjW, l, {C, attn}, true, true);
    if (bias) add(Slot::ProjB, l, {C}, false, true);
    add(Slot::Ln2W, l, {C}, false, true);
    if (bias) add(Slot::Ln2B, l, {C}, false, true);
    add(Slot::FcW, l, {cfg.arch == Arch::Llama ? 2 * F : F, C}, true, true);
    if (bias) add(Slot::FcB, l, {F}, false, true);
    add(Slot::FcProjW, l, {C, F}, true, true);
    if (bias) add(Slot::FcProjB, l, {C}, false, true);
  }
  add(Slot::LnfW, -1, {C}, false, true);
  if (bias) add(Slot::LnfB, -1, {C}, false, true);
  if (!cfg.tied_embeddings()) add(Slot::LmHead, -1, {Vp, C}, true, true);
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

}  // namespace mpitrain
