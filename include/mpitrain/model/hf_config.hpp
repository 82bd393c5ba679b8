// config.json of a Hugging Face checkpoint: one table, per model_type (gpt2, llama, mistral,
// qwen2, qwen3, phi3, mixtral, qwen2_moe, qwen3_moe), of every key the trainer knows and what it
// makes of it:
//   implemented  read into ModelConfig (and written back by the export);
//   inert        changes nothing the trainer computes (architectures, torch_dtype, token ids,
//                use_cache, initializer_range, dropout rates: the trainer trains without
//                dropout, and the weights compute the same function);
//   refused      accepted only at the value that leaves the model as the trainer computes it
//                (transformers' default, e.g. attention_bias false); any other value is
//                UsageError (exit 2) naming the file, the key and the value: a feature the model
//                lacks is never dropped silently.
// A key the table does not know for the model_type is refused too. transformers 5's
// rope_parameters is read as the rope_theta and rope_scaling it merges (agreeing with them where
// the file has both); the export writes those two. mistral, qwen2, qwen3 and phi3
// are the llama architecture; the model_type itself is a key: qwen2 means q/k/v biases, qwen3
// per-head q/k RMSNorm, phi3 (read only: the export writes such a model as llama or mistral)
// q/k/v and gate/up fused in one tensor each. mixtral, qwen2_moe and qwen3_moe are mixtures of
// experts (mixtral: every layer, experts intermediate_size wide; qwen3_moe: qwen3 whose every
// decoder_sparse_step-th MLP is one, experts moe_intermediate_size wide, gates renormalised or
// not by norm_topk_prob, mlp_only_layers naming the first sparse layers or layers
// decoder_sparse_step leaves dense; qwen2_moe: the same on qwen2, plus one shared expert of
// shared_expert_intermediate_size, a multiple of the experts' width, gated per token). Their
// routing loss keys are the objective's, not the function's: HfRouterKeys.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/model/config.hpp"

namespace mpitrain {

enum class HfKeyUse { Implemented, Inert, Refused };

// The training keys of a mixtral / qwen3_moe config.json: router_aux_loss_coef (absent:
// transformers' 0.001) is the weight of the load-balancing loss, the --moe-aux-loss-coef default
// of an --init-from run (whose --moe-aux-loss-form defaults to transformers' all-layers form),
// and the export writes the run's; output_router_logits is transformers'
// switch for returning the router logits, with which (only) its training adds that loss: read
// and reported, but the trainer adds its aux loss whatever it says (as Megatron-Core and
// torchtitan do; --moe-aux-loss-coef 0 trains as transformers would with false); the export
// writes false (the published configs' value: inference returns no router logits).
struct HfRouterKeys {
  double aux_loss_coef = 0.001;
  bool output_router_logits = false;
};

// The model dir/config.json describes. UsageError naming the file and the key when it is
// unreadable, not JSON, of an unknown model_type, lacks a key, holds one out of range, a refused
// value, or a key the table does not know.
// router: where given, receives the routing loss keys (defaults when the model has no experts).
ModelConfig read_hf_config(const std::string& dir, HfRouterKeys* router = nullptr);

// The model_type of dir/config.json: which tensor names and layouts its weights have (phi3's
// fused ones). UsageError as read_hf_config's where the file or the key is missing.
std::string read_hf_model_type(const std::string& dir);

// The model_type transformers has for a model: gpt2; for the llama architecture with experts
// qwen2_moe with gated shared experts, qwen3_moe with per-head q/k norms, else mixtral; without,
// qwen3 with per-head q/k norms, qwen2 with q, k, v biases and no o_proj bias (llama's and
// qwen3's attention_bias cover all four), mistral with a sliding window, else llama.
// (Never phi3: its fused tensors are read, not written.)
std::string hf_model_type(const ModelConfig& config);

// The config.json of the model, as transformers would save it: model_type and the full key set
// of its class, floats as the shortest decimal that reads back as the same float (1e-05, not
// 9.999999747378752e-06). document_token: the tokenizer's BOS/EOS id, if it has one; router:
// the run's routing loss keys (an MoE model's).
nlohmann::json hf_config_json(const ModelConfig& config, std::optional<uint32_t> document_token,
                              const HfRouterKeys& router = {});

// The table's keys for a model_type (empty for an unknown one), in table order: for tests.
std::vector<std::pair<std::string, HfKeyUse>> hf_config_keys(const std::string& model_type);

}  // namespace mpitrain
