#include "mpitrain/train/model_setup.hpp"

#include <type_traits>

#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/model/hf_config.hpp"
#include "mpitrain/model/hf_model.hpp"
#include "mpitrain/model/llmc_model.hpp"
#include "mpitrain/model/moe.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/kept_settings.hpp"

namespace mpitrain {

namespace {

// A model option the user set must equal the model file's (source: "the init-from model F").
template <class V>
void require_same(const Options& o, const char* name, V set_value, V file_value,
                  const std::string& source) {
  if (!o.was_given(name)) return;
  const auto text = [](V v) {
    if constexpr (std::is_same_v<V, Arch>) return to_string(v);
    else if constexpr (std::is_same_v<V, bool>)
      return std::string(v ? "true" : "false");
    else if constexpr (std::is_floating_point_v<V>) return shortest_text(v);
    else if constexpr (std::is_same_v<V, std::string>) return v;
    else return std::to_string(v);
  };
  require(set_value == file_value, std::string(name) + " = " + text(set_value) +
                                       " disagrees with " + source + " (" + text(file_value) + ")");
}

// Every model option the user set must equal the model file's f; norms: also norm-eps and
// rope-theta (files that record them).
void require_given_match(const Options& o, const ModelConfig& f, const std::string& source,
                         bool norms) {
  const ModelConfig& m = o.model;
  require_same(o, "arch", m.arch, f.arch, source);
  require_same(o, "n-layer", m.n_layer, f.n_layer, source);
  require_same(o, "n-head", m.n_head, f.n_head, source);
  require_same(o, "n-kv-head", m.n_kv_head, f.n_kv_head, source);
  require_same(o, "d-model", m.d_model, f.d_model, source);
  require_same(o, "d-ff", m.d_ff, f.d_ff, source);
  require_same(o, "vocab-size", m.vocab_size, f.vocab_size, source);
  require_same(o, "max-seq-len", m.max_seq_len, f.max_seq_len, source);
  require_same(o, "tie-embeddings", m.tie_embeddings, f.tie_embeddings, source);
  require_same(o, "attention-bias", m.proj_bias, f.proj_bias, source);
  require_same(o, "qkv-bias", m.qkv_bias, f.qkv_bias, source);
  require_same(o, "mlp-bias", m.mlp_bias, f.mlp_bias, source);
  require_same(o, "head-dim", m.head_size(), f.head_size(), source);
  require_same(o, "sliding-window", m.sliding_window, f.sliding_window, source);
  require_same(o, "qk-norm", m.qk_norm, f.qk_norm, source);
  require_same(o, "rope-scaling", to_string(m.rope_scaling), to_string(f.rope_scaling), source);
  require_same(o, "gpt2-scale-attn-weights", m.scale_attn_weights, f.scale_attn_weights, source);
  require_same(o, "gpt2-scale-attn-by-layer", m.scale_attn_by_inverse_layer_idx,
               f.scale_attn_by_inverse_layer_idx, source);
  require_same(o, "n-experts", m.n_experts, f.n_experts, source);
  require_same(o, "top-k", m.top_k, f.top_k, source);
  require_same(o, "moe-ff", m.expert_width(), f.expert_width(), source);
  require_same(o, "n-shared-experts", m.n_shared_experts, f.n_shared_experts, source);
  require_same(o, "moe-shared-expert-gate", m.moe_shared_gate, f.moe_shared_gate, source);
  require_same(o, "moe-every", m.moe_every, f.moe_every, source);
  require_same(o, "moe-first-dense", m.moe_first_dense, f.moe_first_dense, source);
  require_same(o, "moe-norm-topk", m.moe_norm_topk, f.moe_norm_topk, source);
  require_same(o, "moe-router-score", std::string(m.moe_router_score()),
               std::string(f.moe_router_score()), source);
  require_same(o, "moe-expert-bias", m.moe_expert_bias, f.moe_expert_bias, source);
  require_same(o, "moe-route-scale", m.moe_route_scale, f.moe_route_scale, source);
  require_same(o, "moe-router-groups", m.moe_groups, f.moe_groups, source);
  require_same(o, "moe-router-group-topk", m.moe_group_topk, f.moe_group_topk, source);
  if (!norms) return;
  require_same(o, "norm-eps", m.norm_eps, f.norm_eps, source);
  require_same(o, "rope-theta", m.rope_theta, f.rope_theta, source);
}

// Model options changed (Options::changed) that the model m would not use: the experts' on a
// dense model, rope-theta on gpt2 (no rotary embedding).
void require_options_apply(const Options& o, const ModelConfig& m) {
  const ModelConfig model;
  const TrainConfig train;
  const bool moe = m.n_experts > 0;
  const std::string dense =
      " is a mixture-of-experts option, and this model is dense (n-experts 0): set n-experts, or "
      "leave it out";
  o.require_used(moe, "top-k", o.model.top_k, model.top_k, dense);
  o.require_used(moe, "moe-ff", o.model.moe_ff, model.moe_ff, dense);
  o.require_used(moe, "n-shared-experts", o.model.n_shared_experts, model.n_shared_experts, dense);
  o.require_used(moe, "moe-shared-expert-gate", o.model.moe_shared_gate, model.moe_shared_gate,
                 dense);
  o.require_used(moe, "moe-every", o.model.moe_every, model.moe_every, dense);
  o.require_used(moe, "moe-first-dense", o.model.moe_first_dense, model.moe_first_dense, dense);
  o.require_used(moe, "moe-norm-topk", o.model.moe_norm_topk, model.moe_norm_topk, dense);
  o.require_used(moe, "moe-router-score", o.model.moe_sigmoid, model.moe_sigmoid, dense);
  o.require_used(moe, "moe-expert-bias", o.model.moe_expert_bias, model.moe_expert_bias, dense);
  o.require_used(moe, "moe-route-scale", o.model.moe_route_scale, model.moe_route_scale, dense);
  o.require_used(moe, "moe-router-groups", o.model.moe_groups, model.moe_groups, dense);
  o.require_used(moe, "moe-router-group-topk", o.model.moe_group_topk, model.moe_group_topk, dense);
  o.require_used(m.moe_expert_bias, "moe-expert-bias-rate", o.train.moe_expert_bias_rate,
                 train.moe_expert_bias_rate,
                 " moves the bias of --moe-expert-bias, which this model has not: set "
                 "--moe-expert-bias true, or leave it out");
  o.require_used(moe, "moe-aux-loss-coef", o.train.moe_aux_loss_coef, train.moe_aux_loss_coef,
                 dense);
  o.require_used(moe, "moe-z-loss-coef", o.train.moe_z_loss_coef, train.moe_z_loss_coef, dense);
  o.require_used(moe, "moe-aux-loss-form", o.train.moe_aux_loss_form, train.moe_aux_loss_form,
                 dense);
  o.require_used(m.arch == Arch::Llama, "rope-theta", o.model.rope_theta, model.rope_theta,
                 " is a llama option (gpt2 has no rotary embedding)");
}

}  // namespace

std::string take_checkpoint_settings(Options& o, const CheckpointManifest& c,
                                     const std::string& path, int dp) {
  require(o.train.init_from.empty() || o.train.resume == "auto",  // auto: the checkpoint's
          "init-from and --resume " + path + " both set the weights: give one of them");
  require_given_match(o, c.model, "the checkpoint " + path, true);
  o.model = c.model;
  TrainConfig& t = o.train;
  if (!o.was_given("seq-len")) t.seq_len = static_cast<int>(c.seq_len);
  if (!o.was_given("seed")) t.seed = c.seed;
  if (!o.was_given("shuffle") && !c.shuffle.empty()) t.shuffle = c.shuffle == "true";
  if (!o.was_given("optimizer")) t.optimizer = to_string(c.optimizer);
  if (!o.was_given("global-batch-size"))
    t.global_batch_size = static_cast<int>(c.global_batch_size);
  if (!o.was_given("moe-aux-loss-coef") && c.moe_aux_loss_coef >= 0)  // recorded: an MoE run's
    t.moe_aux_loss_coef = c.moe_aux_loss_coef;
  if (!o.was_given("moe-z-loss-coef") && c.moe_z_loss_coef >= 0)
    t.moe_z_loss_coef = c.moe_z_loss_coef;
  // an MoE run of a build before the form was kept trained per layer (its settings lack it)
  if (!o.was_given("moe-aux-loss-form") && c.moe_aux_loss_coef >= 0 &&
      !recorded_setting(c.settings, "moe-aux-loss-form"))
    t.moe_aux_loss_form = "per-layer";
  if (!o.was_given("micro-batch-size") && t.global_batch_size % (dp * c.micro_batch_size) == 0)
    t.micro_batch_size = static_cast<int>(c.micro_batch_size);
  return take_kept_settings(o, c.settings);
}

ModelConfig resolve_model_config(const Options& o, const TokenSource* train_data,
                                 int64_t tokenizer_vocab) {
  ModelConfig m = o.model;
  if (!o.train.init_from.empty()) {
    const std::string& file = o.train.init_from;
    const bool hf = is_hf_dir(file);
    require(hf || m.arch == Arch::Gpt2,
            "init-from: " + file + " is not a Hugging Face directory, and llm.c files hold gpt2 "
            "models: arch must be gpt2");
    ModelConfig f = hf ? read_hf_config(file) : read_llmc_config(file);
    if (hf) check_hf_weights(file, f);  // the headers only: refused before any work
    // config.json records norm-eps and rope-theta; llm.c files (gpt2) neither
    require_given_match(o, f, "the init-from model " + file, hf);
    if (!hf) f.norm_eps = m.norm_eps;
    m = f;
  }
  if (m.vocab_size == 0) {
    const int64_t declared =
        train_data && train_data->vocab_size() > 0 ? train_data->vocab_size() : tokenizer_vocab;
    require(declared > 0, (train_data ? train_data->path() : "no training data") +
                              " declares no vocabulary size and records no tokenizer: set "
                              "vocab-size");
    m.vocab_size = static_cast<int>(declared);
  }
  if (m.n_kv_head == 0) m.n_kv_head = m.n_head;
  if (m.d_ff == 0) m.d_ff = default_ffn_width(m.arch, m.d_model);
  if (m.max_seq_len == 0) m.max_seq_len = o.train.seq_len;
  m.validate();
  require_options_apply(o, m);
  require(o.train.seq_len <= m.max_seq_len,
          "seq-len " + std::to_string(o.train.seq_len) + " exceeds the model's " +
              std::to_string(m.max_seq_len) + " positions (max-seq-len)");
  if (train_data)
    require(train_data->vocab_size() <= m.vocab_size,
            train_data->path() + " declares vocab_size " +
                std::to_string(train_data->vocab_size()) + ", more than the model's vocab-size " +
                std::to_string(m.vocab_size));
  return m;
}

std::string take_router_settings(Options& o, const ModelConfig& m) {
  if (m.n_experts == 0) return "";
  const std::string& dir = o.train.init_from;
  const bool hf = !dir.empty() && is_hf_dir(dir);
  std::string& form = o.train.moe_aux_loss_form;
  if (form == "auto") form = hf ? "all-layers" : "per-layer";
  parse_moe_aux_loss(form);  // a checkpoint's recorded text too
  if (!hf) return "";
  HfRouterKeys router;
  read_hf_config(dir, &router);
  const std::string coef = shortest_text(router.aux_loss_coef);
  std::string line = "init-from " + dir + ": moe-aux-loss-coef ";
  if (o.was_given("moe-aux-loss-coef")) {
    line += shortest_text(o.train.moe_aux_loss_coef) +
            " as given (config.json's router_aux_loss_coef: " + coef + ")";
  } else {
    o.train.moe_aux_loss_coef = router.aux_loss_coef;
    line += coef + " from config.json's router_aux_loss_coef";
  }
  const std::string layers = std::to_string(m.moe_layers(0, m.n_layer));
  if (form == "all-layers")
    line += ", weighting one load-balancing loss over the routing of all " + layers +
            " MoE layers, as transformers does (moe-aux-loss-form all-layers)";
  else
    line += ", weighting each of the " + layers + " MoE layers' load-balancing losses, summed " +
            "(moe-aux-loss-form per-layer, " +
            (o.was_given("moe-aux-loss-form") ? "as given" : "as the checkpoint's run trained") +
            "), where transformers weights one loss over all layers' routing";
  if (!router.output_router_logits)
    line += "; its output_router_logits is false (transformers would train without the aux "
            "loss; --moe-aux-loss-coef 0 does so here)";
  return line;
}

std::string describe_yarn_factor(const Options& o, const ModelConfig& m) {
  const ModelConfig::RopeScaling& s = m.rope_scaling;
  const std::string& dir = o.train.init_from;
  if (s.type != ModelConfig::RopeScaling::Type::Yarn || dir.empty() || !is_hf_dir(dir)) return "";
  const double ratio = static_cast<double>(m.max_seq_len) / s.original_max_position;
  if (static_cast<float>(ratio) == s.factor) return "";
  return "init-from " + dir + ": rope_scaling yarn factor " + shortest_text(s.factor) +
         " as config.json gives it (as current transformers takes it); its "
         "max_position_embeddings / original_max_position_embeddings = " +
         std::to_string(m.max_seq_len) + " / " + std::to_string(s.original_max_position) + " = " +
         shortest_text(ratio) + ", which some earlier transformers releases took as the factor";
}

}  // namespace mpitrain
