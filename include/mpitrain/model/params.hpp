// Where every parameter lives in the model's one flat buffer.
//
// Order (so that a pipeline stage is a contiguous range and gradient buckets can be filled in
// reverse layer order):
//   wte (Vp, C), [wpe (maxT, C)]                                    embedding
//   for each layer l, "h.<l>.<slot>":                               blocks
//     gpt2:  ln1.weight (C), ln1.bias (C), attn.qkv.weight (3C, C), attn.qkv.bias (3C),
//            attn.proj.weight (C, C), attn.proj.bias (C), ln2.weight (C), ln2.bias (C),
//            mlp.fc.weight (F, C), mlp.fc.bias (F), mlp.proj.weight (C, F), mlp.proj.bias (C)
//     llama: ln1.weight (C), attn.qkv.weight ((NH+2NKV)hs, C), attn.proj.weight (C, NH hs),
//            ln2.weight (C), mlp.fc.weight (2F, C) = [gate; up], mlp.proj.weight (C, F)
//   lnf.weight (C), [lnf.bias (C)], [lm_head.weight (Vp, C) — llama only; gpt2 ties it to wte]
// Weights are (out, in) row-major. Norm weights and biases get no weight decay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mpitrain/model/config.hpp"

namespace mpitrain {

enum class Slot {
  Wte, Wpe,                                         // embedding
  Ln1W, Ln1B, QkvW, QkvB, ProjW, ProjB,             // attention half of a block
  Ln2W, Ln2B, FcW, FcB, FcProjW, FcProjB,           // MLP half of a block
  LnfW, LnfB, LmHead,                               // head
};

struct ParamTensor {
  std::string name;            // "wte", "h.3.attn.qkv.weight", ...
  Slot slot;
  int layer;                   // block index, -1 outside the blocks
  std::vector<int64_t> shape;  // logical shape
  size_t offset;               // into the flat buffer
  size_t numel;
  bool decay;                  // weight decay applies (matrices and embeddings only)
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);

  const std::vector<ParamTensor>& tensors() const { return tensors_; }
  size_t total() const { return total_; }
  bool has(Slot slot, int layer = -1) const;
  // Offset of a tensor in the flat buffer; Error if the architecture has no such tensor.
  size_t offset(Slot slot, int layer = -1) const;
  const ParamTensor& find(const std::string& name) const;  // Error if absent
  // Parameters that take part in matrix products (all but the embedding lookups wte/wpe, with
  // the output head counted whether tied or not): the N of the MFU formula.
  size_t matmul_params() const;

 private:
  std::vector<ParamTensor> tensors_;
  std::vector<int> index_;  // (slot, layer) -> position in tensors_, -1 if absent
  int n_layer_;
  size_t total_ = 0;
  size_t matmul_params_ = 0;
  int key(Slot slot, int layer) const;
};

}  // namespace mpitrain
