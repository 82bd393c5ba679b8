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

void ModelConfig::validate() const {
  const std::string a = to_string(arch);
  require(n_layer >= 1, "n-layer must be at least 1 (got " + std::to_string(n_layer) + ")");
  require(n_head >= 1, "n-head must be at least 1 (got " + std::to_string(n_head) + ")");
  require(d_model >= 1 && d_model % n_head == 0,
          "d-model (" + std::to_string(d_model) + ") must be a positive multiple of n-head (" +
              std::to_string(n_head) + ")");
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
