#include "mpitrain/model/config.hpp"

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

}  // namespace

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
}

}  // namespace mpitrain
