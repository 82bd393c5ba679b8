#include "mpitrain/model/summary.hpp"

#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/model/params.hpp"

namespace mpitrain {

std::string experts_text(const ModelConfig& c) {
  if (c.n_experts == 0) return "";
  return "MoE E" + std::to_string(c.n_experts) + " K" + std::to_string(c.top_k) + " Fe" +
         std::to_string(c.expert_width()) + " shared " + std::to_string(c.n_shared_experts) +
         (c.moe_shared_gate ? " gated" : "") + " every " + std::to_string(c.moe_every) +
         (c.moe_first_dense > 0 ? " from layer " + std::to_string(c.moe_first_dense) : "") +
         (c.moe_sigmoid ? " sigmoid" : "") + (c.moe_expert_bias ? " expert-bias" : "") +
         (c.moe_norm_topk ? "" : " gates unnormalised") +
         (c.moe_route_scale != 1 ? " scale " + shortest_text(c.moe_route_scale) : "") +
         (c.moe_groups > 1 ? " groups " + std::to_string(c.moe_group_topk) + " of " +
                                 std::to_string(c.moe_groups)
                           : "");
}

double active_params(const ModelConfig& c) {
  const ParamLayout layout(c);
  double n = 0;
  for (const ParamTensor& t : layout.tensors()) {
    const bool routed = t.slot == Slot::ExpertFcW || t.slot == Slot::ExpertProjW;
    n += static_cast<double>(t.numel) * (routed ? static_cast<double>(c.top_k) / c.n_experts : 1);
  }
  return n;
}

}  // namespace mpitrain
