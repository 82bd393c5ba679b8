#include "mpitrain/model/config.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <vector>

#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

std::string to_string(Arch arch) { return arch == Arch::Gpt2 ? "gpt2" : "llama"; }

Arch parse_arch(const std::string& name) {
  if (name == "gpt2") return Arch::Gpt2;
  if (name == "llama") return Arch::Llama;
  throw UsageError("arch must be 'gpt2' or 'llama', not '" + name + "'");
}

int default_ffn_width(Arch arch, int d_model) {
  // In 64 bits: 8 d-model passes an int from d-model 2^28 (the option's bound) on.
  const int64_t d = d_model;
  return static_cast<int>(arch == Arch::Gpt2 ? 4 * d : (8 * d / 3 + 63) / 64 * 64);
}

void ModelConfig::set_arch(Arch a) {
  arch = a;
  const bool gpt2 = a == Arch::Gpt2;
  tie_embeddings = qkv_bias = proj_bias = mlp_bias = gpt2;
}

namespace {

constexpr int64_t kMaxAttentionWidth = int64_t{3} << 28;  // as 3 d-model at most (fits an int)

using RopeType = ModelConfig::RopeScaling::Type;

void validate_attention_variants(const ModelConfig& c) {
  const bool llama = c.arch == Arch::Llama;
  require(llama || !c.qk_norm, "qk-norm is a llama option (gpt2 has no per-head q/k norm)");
  require(llama || c.rope_scaling.type == RopeType::None,
          "rope-scaling is a llama option (gpt2 has no rotary embedding)");
  require(!llama || (c.scale_attn_weights && !c.scale_attn_by_inverse_layer_idx),
          "scale_attn_weights / scale_attn_by_inverse_layer_idx are gpt2 options");
  require(c.sliding_window >= 0, "sliding-window must be positive, or 0 for none (got " +
                                     std::to_string(c.sliding_window) + ")");
  require(llama || c.sliding_window == 0,
          "sliding-window is a llama option (gpt2 attends to the whole context)");
  const ModelConfig::RopeScaling& r = c.rope_scaling;
  if (r.type == RopeType::None) return;
  require(r.factor > 0.0f, "rope-scaling factor must be positive");
  if (r.type == RopeType::Linear) return;
  const std::string type = r.type == RopeType::Llama3 ? "llama3" : "yarn";
  require(r.original_max_position >= 1,
          "rope-scaling " + type + " original_max_position_embeddings must be at least 1");
  if (r.type == RopeType::Yarn) {
    require(r.beta_slow > 0.0f && r.beta_fast >= r.beta_slow,
            "rope-scaling yarn needs 0 < beta_slow <= beta_fast");
    require(r.attention_factor >= 0.0f,
            "rope-scaling yarn attention factor must be positive (or 0: derived from factor)");
    return;
  }
  require(r.low_freq_factor > 0.0f && r.high_freq_factor > r.low_freq_factor,
          "rope-scaling llama3 needs 0 < low_freq_factor < high_freq_factor");
}

// Group-limited routing: groups that split the experts evenly, of which the chosen ones hold
// at least top-k experts and are each worth a sum of at least one key (top-k / group-topk >= 1).
void validate_expert_groups(const ModelConfig& c) {
  const std::string g = std::to_string(c.moe_groups), m = std::to_string(c.moe_group_topk);
  require(c.moe_groups >= 1 && c.n_experts % c.moe_groups == 0,
          "moe-router-groups must divide n-experts (" + std::to_string(c.n_experts) +
              ") into equal groups, got " + g);
  if (c.moe_groups == 1) {
    require(c.moe_group_topk == 0, "moe-router-group-topk " + m +
                                       " limits the groups of moe-router-groups, which is 1: "
                                       "give both, or neither");
    return;
  }
  require(c.moe_group_topk >= 1 && c.moe_group_topk <= c.moe_groups,
          "moe-router-groups " + g +
              " needs moe-router-group-topk, the groups each token chooses its experts from, "
              "between 1 and " +
              g + " (got " + m + ")");
  require(c.moe_group_topk <= c.top_k,
          "moe-router-group-topk " + m + " exceeds top-k (" + std::to_string(c.top_k) +
              "): a group is worth the sum of its top top-k / moe-router-group-topk scores, "
              "which would be none");
  require(int64_t{c.moe_group_topk} * (c.n_experts / c.moe_groups) >= c.top_k,
          "moe-router-group-topk " + m + " groups of " +
              std::to_string(c.n_experts / c.moe_groups) + " experts hold fewer than top-k (" +
              std::to_string(c.top_k) + ") experts");
}

void validate_experts(const ModelConfig& c) {
  if (c.n_experts == 0) return;
  require(c.n_experts >= 1, "n-experts must be 0 (dense) or at least 1 (got " +
                                std::to_string(c.n_experts) + ")");
  require(c.arch == Arch::Llama, "mixture of experts is a llama option (gpt2's MLP is dense)");
  require(c.top_k >= 1 && c.top_k <= c.n_experts,
          "top-k must be between 1 and n-experts (" + std::to_string(c.n_experts) + "), got " +
              std::to_string(c.top_k));
  require(c.moe_ff >= 0, "moe-ff must be positive, or 0 for d-ff (got " +
                             std::to_string(c.moe_ff) + ")");
  require(c.n_shared_experts >= 0, "n-shared-experts must not be negative");
  require(int64_t{c.n_shared_experts} * c.expert_width() <= kMaxAttentionWidth,
          "the shared experts' width n-shared-experts x expert width is too large");
  require(c.moe_every >= 1 && c.moe_every <= c.n_layer,
          "moe-every must be between 1 and n-layer (" + std::to_string(c.n_layer) +
              ") so that some layer is MoE, got " + std::to_string(c.moe_every));
  require(c.moe_first_dense >= 0 && c.moe_layers(0, c.n_layer) > 0,
          "moe-first-dense must be from 0 to a count of first layers that leaves some layer MoE "
          "(n-layer " +
              std::to_string(c.n_layer) + ", moe-every " + std::to_string(c.moe_every) + "), got " +
              std::to_string(c.moe_first_dense));
  require(!c.moe_shared_gate || c.n_shared_experts > 0,
          "moe-shared-expert-gate gates the shared experts, and n-shared-experts is 0");
  require(!c.mlp_bias, "MLP biases with mixture of experts are not supported (no MoE model has them)");
  require(!c.moe_expert_bias || c.moe_sigmoid,
          "moe-expert-bias needs moe-router-score sigmoid (the bias shifts sigmoid scores, as "
          "DeepSeek-V3's and Megatron-Core's)");
  require(!(c.moe_sigmoid && c.top_k == 1 && c.moe_norm_topk),
          "moe-router-score sigmoid with top-k 1 and moe-norm-topk true makes every gate 1, so "
          "that the router learns nothing from the loss: set moe-norm-topk false (Llama 4's "
          "routing, Megatron-Core's for top-1)");
  require(
      std::isfinite(c.moe_route_scale) && c.moe_route_scale > 0,
      "moe-route-scale must be a positive number (got " + shortest_text(c.moe_route_scale) + ")");
  validate_expert_groups(c);
}

// A number of the --rope-scaling text; UsageError naming it.
template <class V>
V rope_number(const std::string& key, const std::string& text) {
  V v{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size())
    throw UsageError("rope-scaling " + key + "='" + text + "' is not a number");
  return v;
}

}  // namespace

ModelConfig::RopeScaling parse_rope_scaling(const std::string& text) {
  ModelConfig::RopeScaling r;
  const size_t colon = text.find(':');
  const std::string type = text.substr(0, colon);
  const char* expected =
      "expected none, linear:factor=F, llama3:factor=F,low=L,high=H,orig=N or "
      "yarn:factor=F,orig=N[,beta_fast=B][,beta_slow=S][,attn=A]";
  if (type == "none" && colon == std::string::npos) return r;
  if (type != "linear" && type != "llama3" && type != "yarn")
    throw UsageError("rope-scaling '" + text + "': type '" + type + "' is not supported; " +
                     expected);
  r.type = type == "linear"   ? RopeType::Linear
           : type == "llama3" ? RopeType::Llama3
                              : RopeType::Yarn;
  std::map<std::string, std::string> values;  // key -> its text
  const std::string rest = colon == std::string::npos ? "" : text.substr(colon + 1);
  for (size_t at = 0; at < rest.size();) {
    const size_t comma = std::min(rest.find(',', at), rest.size());
    const std::string item = rest.substr(at, comma - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || !values.emplace(item.substr(0, eq), item.substr(eq + 1)).second)
      throw UsageError("rope-scaling '" + text + "': '" + item + "' is not a new key=value; " +
                       expected);
    at = comma + 1;
  }
  using Keys = std::vector<std::string>;
  const Keys required = r.type == RopeType::Linear   ? Keys{"factor"}
                        : r.type == RopeType::Llama3 ? Keys{"factor", "low", "high", "orig"}
                                                     : Keys{"factor", "orig"};
  const Keys optional = r.type == RopeType::Yarn ? Keys{"beta_fast", "beta_slow", "attn"} : Keys{};
  const auto known = [](const Keys& keys, const std::string& key) {
    return std::find(keys.begin(), keys.end(), key) != keys.end();
  };
  for (const auto& [key, value] : values)
    if (!known(required, key) && !known(optional, key))
      throw UsageError("rope-scaling '" + text + "': unknown key '" + key + "'; " + expected);
  for (const std::string& key : required)
    if (!values.count(key))
      throw UsageError("rope-scaling '" + text + "': " + key + "= is missing; " + expected);
  const auto number = [&](const std::string& key, float* out) {
    if (values.count(key)) *out = rope_number<float>(key, values[key]);
  };
  number("factor", &r.factor);
  number("low", &r.low_freq_factor);
  number("high", &r.high_freq_factor);
  if (values.count("orig")) r.original_max_position = rope_number<int>("orig", values["orig"]);
  number("beta_fast", &r.beta_fast);
  number("beta_slow", &r.beta_slow);
  number("attn", &r.attention_factor);
  if (values.count("attn") && !(r.attention_factor > 0.0f))
    throw UsageError("rope-scaling '" + text + "': attn= must be positive; " + expected);
  return r;
}

std::string to_string(const ModelConfig::RopeScaling& r) {
  switch (r.type) {
    case RopeType::None: return "none";
    case RopeType::Linear: return "linear:factor=" + shortest_text(r.factor);
    case RopeType::Llama3:
      return "llama3:factor=" + shortest_text(r.factor) + ",low=" + shortest_text(r.low_freq_factor) +
             ",high=" + shortest_text(r.high_freq_factor) +
             ",orig=" + std::to_string(r.original_max_position);
    case RopeType::Yarn:
      return "yarn:factor=" + shortest_text(r.factor) +
             ",orig=" + std::to_string(r.original_max_position) +
             ",beta_fast=" + shortest_text(r.beta_fast) +
             ",beta_slow=" + shortest_text(r.beta_slow) +
             (r.attention_factor > 0.0f ? ",attn=" + shortest_text(r.attention_factor) : "");
  }
  return "?";
}

void ModelConfig::validate() const {
  require(n_layer >= 1, "n-layer must be at least 1 (got " + std::to_string(n_layer) + ")");
  require(n_head >= 1, "n-head must be at least 1 (got " + std::to_string(n_head) + ")");
  require(head_dim >= 0, "head-dim must be positive, or 0 for d-model / n-head (got " +
                             std::to_string(head_dim) + ")");
  require(d_model >= 1 && (head_dim > 0 || d_model % n_head == 0),
          "d-model (" + std::to_string(d_model) + ") must be a positive multiple of n-head (" +
              std::to_string(n_head) + ") unless head-dim is set");
  require(int64_t{n_head + 2 * int64_t{n_kv_head}} * head_size() <= kMaxAttentionWidth,
          "the attention's q, k, v width (n-head + 2 n-kv-head) x head size exceeds " +
              std::to_string(kMaxAttentionWidth));
  require(arch == Arch::Llama || head_dim == 0 || int64_t{head_dim} * n_head == d_model,
          "gpt2's head size is d-model / n-head (" + std::to_string(d_model / n_head) +
              "): head-dim " + std::to_string(head_dim) + " is llama's only");
  require(arch == Arch::Llama || (qkv_bias && proj_bias && mlp_bias),
          "gpt2 has every bias: qkv, proj and mlp biases cannot be turned off");
  require(!proj_bias || qkv_bias,
          "an attention output (o_proj) bias without q/k/v biases: use attention-bias for both");
  require(n_kv_head >= 1 && n_head % n_kv_head == 0,
          "n-kv-head (" + std::to_string(n_kv_head) + ") must divide n-head (" +
              std::to_string(n_head) + ")");
  require(arch == Arch::Llama || n_kv_head == n_head,
          "gpt2 has no grouped-query attention: n-kv-head must equal n-head (" +
              std::to_string(n_head) + "), got " + std::to_string(n_kv_head));
  require(arch == Arch::Gpt2 || head_size() % 2 == 0,
          "llama's rotary embedding needs an even head size, got " + std::to_string(head_size()));
  require(d_ff >= 1, "d-ff must be at least 1 (got " + std::to_string(d_ff) + ")");
  require(vocab_size >= 2, "vocab-size must be at least 2 (got " + std::to_string(vocab_size) + ")");
  require(max_seq_len >= 1, "seq-len must be at least 1 (got " + std::to_string(max_seq_len) + ")");
  require(norm_eps > 0.0f, "norm-eps must be positive");
  require(rope_theta > 0.0f, "rope-theta must be positive");
  validate_attention_variants(*this);
  validate_experts(*this);
}

}  // namespace mpitrain
