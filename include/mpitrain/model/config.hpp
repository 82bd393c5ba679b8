// The model's shape: everything needed to lay out parameters and activations.
#pragma once

#include <cstdint>
#include <string>

namespace mpitrain {

enum class Arch { Gpt2, Llama };

// The largest vocab_size a model can have: padded_vocab() must still fit an int.
inline constexpr int kMaxVocabSize = 2147483647 - 127;

std::string to_string(Arch arch);
Arch parse_arch(const std::string& name);  // "gpt2" | "llama"; UsageError otherwise
// d-ff when not given: gpt2 4 d; llama 8/3 d rounded up to a multiple of 64 (Meta uses 256;
// 64 suits small models).
int default_ffn_width(Arch arch, int d_model);

struct ModelConfig {
  Arch arch = Arch::Gpt2;
  int n_layer = 4;
  int n_head = 4;
  int n_kv_head = 4;    // == n_head for gpt2; fewer for grouped-query attention (llama)
  int d_model = 128;
  int d_ff = 512;       // gpt2: MLP hidden width; llama: SwiGLU hidden width
  int vocab_size = 256;
  int max_seq_len = 64; // positions the model supports (gpt2: rows of wpe)
  // llama: 0, each query attends to every earlier position; W > 0, only to the W latest (itself
  // included: Mistral's sliding_window, as transformers masks it; attention_sees), every layer.
  int sliding_window = 0;
  float norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  // Set by set_arch to the architecture's defaults (gpt2: tied, every bias; llama: own head, no
  // bias); llama may change them. gpt2's LayerNorm biases exist whatever these say.
  bool tie_embeddings = true;  // the head is wte (no lm_head)
  bool qkv_bias = true;        // attn.qkv.bias (q, k, v; llama: Qwen2, attention_bias)
  bool proj_bias = true;       // attn.proj.bias (llama: attention_bias's o_proj bias)
  bool mlp_bias = true;        // mlp.fc.bias and mlp.proj.bias (llama: gate, up and down biases)
  int head_dim = 0;            // 0 = d_model / n_head; llama: any (attention width n_head head_dim)

  // arch and its defaults of the fields above.
  void set_arch(Arch a);
  int head_size() const { return head_dim > 0 ? head_dim : d_model / n_head; }
  int qkv_width() const { return (n_head + 2 * n_kv_head) * head_size(); }
  // The positions a query's attention spans at most in a sequence of seq_len: all of them, or
  // the sliding window where shorter (the flop counts' attention context).
  int attention_span(int seq_len) const {
    return sliding_window > 0 && sliding_window < seq_len ? sliding_window : seq_len;
  }
  // The vocabulary rounded up to a multiple of 128 (as llm.c): aligned GEMMs, and rows
  // vocab_size..padded_vocab-1 of the embedding are zero and never trained.
  int padded_vocab() const { return (vocab_size + 127) / 128 * 128; }

  // Throws UsageError naming the first inconsistency (heads not dividing d_model, ...).
  void validate() const;

  // ---- attention variants: q/k norm, RoPE scaling, gpt2's score scales ----------------------
  bool qk_norm = false;  // RMSNorm over each q and k head (weights hs, shared by heads) before RoPE
  // RoPE frequency scaling (llama), as transformers: "linear" divides every frequency by factor;
  // "llama3" (_compute_llama3_parameters) divides wavelengths longer than
  // original_max_position / low_freq_factor, keeps those shorter than
  // original_max_position / high_freq_factor, and blends the ones between; "yarn"
  // (_compute_yarn_parameters) keeps the pairs turning more than beta_fast times in
  // original_max_position positions, divides those turning fewer than beta_slow times, blends
  // the ones between linearly in the pair's index, and multiplies cos and sin by the attention
  // factor (0: derived, 0.1 ln(factor) + 1 for factor > 1, else 1).
  struct RopeScaling {
    enum class Type { None, Linear, Llama3, Yarn } type = Type::None;
    float factor = 1, low_freq_factor = 1, high_freq_factor = 4;
    int original_max_position = 8192;
    float beta_fast = 32, beta_slow = 1, attention_factor = 0;  // yarn
  } rope_scaling;
  bool scale_attn_weights = true;                // gpt2: scores / sqrt(hs); false: unscaled
  bool scale_attn_by_inverse_layer_idx = false;  // gpt2: scores further / (block index + 1)

  // ---- mixture of experts (llama; n_experts 0 = every MLP dense) ----------------------------
  // An MoE layer's MLP is a router (E, C) choosing top_k of n_experts SwiGLU experts per token
  // (gates: the softmax over all E renormalised over the chosen, as Mixtral; without
  // moe_norm_topk the chosen experts' softmax probabilities as they are), plus, with
  // n_shared_experts > 0, one shared SwiGLU every token passes, of width
  // n_shared_experts x expert width (DeepSeek's shared experts, held in mlp.fc / mlp.proj).
  int n_experts = 0;
  int top_k = 2;
  int moe_ff = 0;            // each expert's SwiGLU width; 0 = d_ff
  int n_shared_experts = 0;
  // The shared experts' output times sigmoid(x wg), a learned gate per token (qwen2_moe's
  // shared_expert_gate, Megatron-Core's --moe-shared-expert-gate); wg (C) per MoE layer.
  bool moe_shared_gate = false;
  int moe_every = 1;         // layer l is MoE when (l + 1) % moe_every == 0 (HF decoder_sparse_step)
  int moe_first_dense = 0;   // and l >= this (DeepSeek's first_k_dense_replace)
  bool moe_norm_topk = true;  // the gates renormalised over the chosen (HF norm_topk_prob)
  // The router's scores (DeepSeek-V3, Megatron-Core's --moe-router-score-function sigmoid):
  // sigmoid(z_e) per expert instead of the softmax over all; the gates are the chosen scores
  // (renormalised under moe_norm_topk). With moe_expert_bias the choice takes the top k of score
  // + b_e, a per-expert bias the training updates after each step towards equal loads
  // (aux-loss-free balancing), the gates the scores without it. moe_route_scale multiplies
  // every gate (HF routed_scaling_factor, Megatron's --moe-router-topk-scaling-factor).
  bool moe_sigmoid = false;
  bool moe_expert_bias = false;  // sigmoid only
  float moe_route_scale = 1;
  // Group-limited routing (DeepSeek-V2/V3's n_group / topk_group, Megatron-Core's
  // --moe-router-num-groups / --moe-router-group-topk): the experts in moe_groups equal groups of
  // consecutive indices, each row choosing among the experts of its moe_group_topk best groups
  // only, a group's worth the sum of its top top_k / moe_group_topk choice keys (score, + bias);
  // 1 group (and group top-k 0): no limit.
  int moe_groups = 1;
  int moe_group_topk = 0;
  const char* moe_router_score() const { return moe_sigmoid ? "sigmoid" : "softmax"; }
  bool is_moe_layer(int l) const {
    return n_experts > 0 && l >= moe_first_dense && (l + 1) % moe_every == 0;
  }
  // How many of the layers [begin, end) are MoE (is_moe_layer); moe_layers(0, l) is MoE layer l's
  // index among them.
  int moe_layers(int begin, int end) const {
    const auto below = [&](int n) {  // the MoE layers under n: the step's, less the dense first
      return n / moe_every - (n < moe_first_dense ? n : moe_first_dense) / moe_every;
    };
    return n_experts > 0 ? below(end) - below(begin) : 0;
  }
  int expert_width() const { return moe_ff > 0 ? moe_ff : d_ff; }
  // The MLP width of layer l held in mlp.fc / mlp.proj: d_ff for a dense layer, the shared
  // experts' width for an MoE layer (0: none).
  int dense_mlp_width(int l) const {
    return is_moe_layer(l) ? n_shared_experts * expert_width() : d_ff;
  }
};

// "none" | "linear:factor=F" | "llama3:factor=F,low=L,high=H,orig=N" |
// "yarn:factor=F,orig=N[,beta_fast=B][,beta_slow=S][,attn=A]" (the trainer's --rope-scaling and
// the checkpoint manifest); UsageError naming what is wrong.
ModelConfig::RopeScaling parse_rope_scaling(const std::string& text);
std::string to_string(const ModelConfig::RopeScaling& scaling);

}  // namespace mpitrain
