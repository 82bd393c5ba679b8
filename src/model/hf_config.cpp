#include "mpitrain/model/hf_config.hpp"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "mpitrain/io/json_input.hpp"
#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kConfig = "config.json";

// A config.json being read: the model so far, and what the checks need.
struct Reading {
  std::string file;
  const json& doc;  // the whole file: a key whose meaning overlaps another's checks that one
  ModelConfig c;
  HfRouterKeys router;
};

// What the export writes from.
struct Writing {
  const ModelConfig& c;
  std::optional<uint32_t> token;
  const HfRouterKeys& router;
};

// One key of the table. read checks the value and sets the model (inert: nothing); it gets
// `absent` when the file lacks the key (nullopt: the key is required).
struct KeyRule {
  std::string key;
  HfKeyUse use;
  std::optional<json> absent;
  std::function<void(const std::string&, const json&, Reading&)> read;
  std::function<json(const Writing&)> write;  // the exported value; empty: not written
};

std::string shown(const json& v) {
  std::string s = v.dump();
  return s.size() > 80 ? s.substr(0, 77) + "..." : s;
}

[[noreturn]] void refuse(const Reading& r, const std::string& key, const json& v,
                         const std::string& why) {
  throw UsageError(r.file + ": " + key + " = " + shown(v) + ": " + why);
}

// The float's shortest decimal (1e-05 for 1e-5f), as the double JSON writes.
double decimal(float x) {
  const std::string text = shortest_text(x);
  double d = 0;
  std::from_chars(text.data(), text.data() + text.size(), d);
  return d;
}

int positive_int(const std::string& key, const json& v, const Reading& r) {
  require_json_kind(v.is_number_integer(), v, r.file, key, "an integer");
  if (v.is_number_unsigned() ? v.get<uint64_t>() < 1 || v.get<uint64_t>() > (uint64_t{1} << 28)
                             : v.get<int64_t>() < 1 || v.get<int64_t>() > (int64_t{1} << 28))
    refuse(r, key, v, "outside [1, 2^28]");
  return v.get<int>();
}

// --- the kinds of rules ---------------------------------------------------------------------

KeyRule inert(std::string key, std::function<json(const Writing&)> write = {}) {
  return {std::move(key), HfKeyUse::Inert, json(), [](auto&&...) {}, std::move(write)};
}

KeyRule inert_value(std::string key, json written) {
  return inert(std::move(key), [written](const Writing&) { return written; });
}

// A required positive integer (absent_value: when absent or null, from the model so far).
KeyRule count(std::string key, int ModelConfig::*field,
              std::function<int(const ModelConfig&)> absent_value = {}) {
  const bool required = !absent_value;
  return {std::move(key), HfKeyUse::Implemented,
          required ? std::nullopt : std::optional<json>(json()),
          [=](const std::string& k, const json& v, Reading& r) {
            r.c.*field = v.is_null() && !required ? absent_value(r.c) : positive_int(k, v, r);
          },
          [=](const Writing& w) { return json(w.c.*field); }};
}

KeyRule positive(std::string key, float ModelConfig::*field, float fallback) {
  return {std::move(key), HfKeyUse::Implemented, json(fallback),
          [=](const std::string& k, const json& v, Reading& r) {
            require_json_kind(v.is_number(), v, r.file, k, "a number");
            if (!(v.get<double>() > 0)) refuse(r, k, v, "must be a positive number");
            r.c.*field = v.get<float>();
          },
          [=](const Writing& w) { return json(decimal(w.c.*field)); }};
}

// A boolean read into the model (absent: transformers' default); what a refused_unless key
// becomes when its feature lands: refused_unless("mlp_bias", {false}, ...) ->
// flag("mlp_bias", false, &ModelConfig::mlp_bias).
template <class Field>
KeyRule flag(std::string key, bool absent, Field field) {
  return {std::move(key), HfKeyUse::Implemented, json(absent),
          [=](const std::string& k, const json& v, Reading& r) {
            require_json_kind(v.is_boolean(), v, r.file, k, "a boolean");
            r.c.*field = v.get<bool>();
          },
          [=](const Writing& w) { return json(w.c.*field); }};
}

// Accepted only as one of `values` (the first is what the export writes and, unless `absent`
// says otherwise, transformers' default): another value would change the model in a way the
// trainer does not compute.
KeyRule refused_unless(std::string key, std::vector<json> values, std::string why,
                       std::optional<json> absent = std::nullopt) {
  const json first = values.front();
  return {std::move(key), HfKeyUse::Refused, absent ? *absent : first,
          [=](const std::string& k, const json& v, Reading& r) {
            if (first.is_boolean()) require_json_kind(v.is_boolean(), v, r.file, k, "a boolean");
            if (first.is_string()) require_json_kind(v.is_string(), v, r.file, k, "a string");
            if (first.is_number()) require_json_kind(v.is_number(), v, r.file, k, "a number");
            if (std::find(values.begin(), values.end(), v) == values.end()) refuse(r, k, v, why);
          },
          [=](const Writing&) { return first; }};
}

// A model_type the model implements; implies: what it means beyond the architecture (qwen2:
// q/k/v biases).
KeyRule model_type(std::string type, Arch arch, std::function<void(ModelConfig&)> implies = {}) {
  return {"model_type", HfKeyUse::Implemented, std::nullopt,
          [=](const std::string&, const json&, Reading& r) {
            r.c.arch = arch;
            if (implies) implies(r.c);
          },
          [=](const Writing&) { return json(type); }};
}

// head_dim: the head size (absent: transformers' default, `absent`; null: hidden_size /
// num_attention_heads, kept as 0 = that quotient, as is a size equal to it).
KeyRule head_dim(json absent) {
  return {"head_dim", HfKeyUse::Implemented, std::move(absent),
          [](const std::string& k, const json& v, Reading& r) {
            const int given = v.is_null() ? 0 : positive_int(k, v, r);
            r.c.head_dim = given * r.c.n_head == r.c.d_model ? 0 : given;
          },
          [](const Writing& w) { return json(w.c.head_size()); }};
}

// The keys of a rope_scaling type besides rope_type (none: a type the model lacks).
std::vector<std::string> rope_scaling_keys(const json& type) {
  if (type == "linear") return {"factor"};
  if (type == "llama3")
    return {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"};
  if (type == "yarn")
    return {"factor",           "original_max_position_embeddings",
            "beta_fast",        "beta_slow",
            "attention_factor", "truncate"};
  return {};
}

// transformers' rope_scaling dict (modeling_rope_utils.py; `rope_type`, or the older `type`):
// null or default (none), linear (factor), llama3 (factor, low/high_freq_factor,
// original_max_position_embeddings) or yarn (factor; original_max_position_embeddings, absent:
// max_position_embeddings; beta_fast, beta_slow, attention_factor: absent or null, transformers'
// defaults; truncate true only); any other type or key refused. yarn's factor is taken as given,
// as current transformers does (some earlier releases took max_position_embeddings /
// original_max_position_embeddings instead: the start-up says where the two differ).
void read_rope_scaling(const std::string& k, const json& v, Reading& r) {
  using Type = ModelConfig::RopeScaling::Type;
  using Keys = std::vector<std::string>;
  if (v.is_null()) return;
  require_json_kind(v.is_object(), v, r.file, k, "an object or null");
  const json type = v.contains("rope_type") ? v["rope_type"] : v.value("type", json());
  const Keys keys = rope_scaling_keys(type);
  if (type == "default") {  // transformers' name for none
    if (v.size() > 1) refuse(r, k, v, "rope_type default takes no scaling keys");
    return;
  }
  if (keys.empty()) refuse(r, k, v, "RoPE scaling of type default, linear, llama3 or yarn only");
  for (const auto& [name, value] : v.items()) {
    if (type == "yarn" && (name == "mscale" || name == "mscale_all_dim"))
      refuse(r, k, v, "yarn's '" + name + "' (DeepSeek's attention scale) is not implemented");
    if (name != "rope_type" && name != "type" &&
        std::find(keys.begin(), keys.end(), name) == keys.end())
      refuse(r, k, v, "its key '" + name + "' is not one of " + type.dump() + "'s");
  }
  const auto given = [&](const std::string& name) {
    return v.contains(name) && !v[name].is_null();
  };
  const auto number = [&](const std::string& name) {
    if (!given(name) || !v[name].is_number())
      refuse(r, k, v, type.dump() + " needs a number '" + name + "'");
    return v[name].get<double>();
  };
  const auto positive_number = [&](const std::string& name) {
    const double x = number(name);
    if (!(x > 0)) refuse(r, k, v, "its '" + name + "' must be positive");
    return static_cast<float>(x);
  };
  ModelConfig::RopeScaling& s = r.c.rope_scaling;
  s.type = type == "linear" ? Type::Linear : type == "llama3" ? Type::Llama3 : Type::Yarn;
  s.factor = static_cast<float>(number("factor"));
  if (s.type == Type::Linear) return;
  const double orig = s.type == Type::Yarn && !given("original_max_position_embeddings")
                          ? r.c.max_seq_len
                          : number("original_max_position_embeddings");
  if (!(orig >= 1 && orig <= (1 << 28) && orig == static_cast<int>(orig)))
    refuse(r, k, v, "original_max_position_embeddings must be an integer in [1, 2^28]");
  s.original_max_position = static_cast<int>(orig);
  if (s.type == Type::Llama3) {
    s.low_freq_factor = static_cast<float>(number("low_freq_factor"));
    s.high_freq_factor = static_cast<float>(number("high_freq_factor"));
    return;
  }
  if (given("beta_fast")) s.beta_fast = positive_number("beta_fast");
  if (given("beta_slow")) s.beta_slow = positive_number("beta_slow");
  if (given("attention_factor")) s.attention_factor = positive_number("attention_factor");
  if (given("truncate") && v["truncate"] != true)
    refuse(r, k, v, "yarn's truncate false (gpt-oss's unrounded ramp) is not implemented");
}

json write_rope_scaling(const Writing& w) {
  using Type = ModelConfig::RopeScaling::Type;
  const ModelConfig::RopeScaling& s = w.c.rope_scaling;
  const ModelConfig::RopeScaling defaults;
  if (s.type == Type::None) return nullptr;
  if (s.type == Type::Linear) return {{"rope_type", "linear"}, {"factor", decimal(s.factor)}};
  if (s.type == Type::Yarn) {
    json yarn = {{"rope_type", "yarn"},
                 {"factor", decimal(s.factor)},
                 {"original_max_position_embeddings", s.original_max_position}};
    if (s.beta_fast != defaults.beta_fast) yarn["beta_fast"] = decimal(s.beta_fast);
    if (s.beta_slow != defaults.beta_slow) yarn["beta_slow"] = decimal(s.beta_slow);
    if (s.attention_factor > 0) yarn["attention_factor"] = decimal(s.attention_factor);
    return yarn;
  }
  return {{"rope_type", "llama3"},
          {"factor", decimal(s.factor)},
          {"low_freq_factor", decimal(s.low_freq_factor)},
          {"high_freq_factor", decimal(s.high_freq_factor)},
          {"original_max_position_embeddings", s.original_max_position}};
}

KeyRule rope_scaling() {
  return {"rope_scaling", HfKeyUse::Implemented, json(), read_rope_scaling, write_rope_scaling};
}

// transformers 5's rope_parameters (the name its configs save rope_scaling under, rope_theta
// inside): one dict for all layers, rope_type "default" (no scaling) or one rope_scaling takes,
// read as those two keys; where the file has them too, they must agree. partial_rotary_factor
// 1 only; a dict per layer type is refused. Not exported: the export writes rope_theta and
// rope_scaling, which transformers 5 reads as well.
KeyRule rope_parameters() {
  return {"rope_parameters",
          HfKeyUse::Implemented,
          json(),
          [](const std::string& k, const json& v, Reading& r) {
            if (v.is_null()) return;
            require_json_kind(v.is_object(), v, r.file, k, "an object or null");
            json scaling = json::object();
            for (const auto& [name, value] : v.items()) {
              if (value.is_object())
                refuse(r, k, v, "RoPE parameters per layer type are not implemented");
              if (name == "partial_rotary_factor" && value != 1)
                refuse(r, k, v,
                       "RoPE over part of each head (partial_rotary_factor) is not "
                       "implemented");
              if (name != "rope_theta" && name != "partial_rotary_factor") scaling[name] = value;
            }
            if (v.contains("rope_theta")) {
              const json& theta = v["rope_theta"];
              if (!theta.is_number() || !(theta.get<double>() > 0))
                refuse(r, k, v, "its rope_theta must be a positive number");
              if (r.doc.contains("rope_theta") && theta.get<float>() != r.c.rope_theta)
                refuse(r, k, v,
                       "its rope_theta disagrees with the file's rope_theta " +
                           shown(r.doc["rope_theta"]));
              r.c.rope_theta = theta.get<float>();
            }
            if (!scaling.contains("rope_type") && !scaling.contains("type"))
              scaling["rope_type"] = "default";  // transformers 5's when absent
            const ModelConfig::RopeScaling older = r.c.rope_scaling;
            r.c.rope_scaling = {};
            read_rope_scaling(k, scaling, r);
            if (!r.doc.value("rope_scaling", json()).is_null() &&
                to_string(older) != to_string(r.c.rope_scaling))
              refuse(r, k, v,
                     "it disagrees with the file's rope_scaling " + shown(r.doc["rope_scaling"]));
          },
          {}};
}

// attention_bias of llama and qwen3: biases on all of q, k, v and o.
KeyRule attention_bias() {
  return {"attention_bias", HfKeyUse::Implemented, json(false),
          [](const std::string& k, const json& v, Reading& r) {
            require_json_kind(v.is_boolean(), v, r.file, k, "a boolean");
            r.c.qkv_bias = r.c.proj_bias = v.get<bool>();
          },
          [](const Writing& w) { return json(w.c.proj_bias); }};
}

// mistral's, mixtral's and phi3's sliding window on every layer (absent: transformers' default,
// mistral's 4096, mixtral's and phi3's null; null: none): ModelConfig::sliding_window, which the
// export writes back (as mistral or mixtral).
KeyRule sliding_window(json absent) {
  return {
      "sliding_window", HfKeyUse::Implemented, std::move(absent),
      [](const std::string& k, const json& v, Reading& r) {
        if (!v.is_null()) r.c.sliding_window = positive_int(k, v, r);
      },
      [](const Writing& w) { return w.c.sliding_window > 0 ? json(w.c.sliding_window) : json(); }};
}

// Newer transformers' per-layer attention kinds (qwen2, qwen3): full attention only.
KeyRule layer_types() {
  return {"layer_types", HfKeyUse::Refused, json(),
          [](const std::string& k, const json& v, Reading& r) {
            if (v.is_null()) return;
            require_json_kind(v.is_array(), v, r.file, k, "an array");
            for (const json& t : v)
              if (t != "full_attention")
                refuse(r, k, v, "layers of another kind than full_attention are not implemented");
          },
          {}};
}

// A rule whose exported value is another than its field's.
KeyRule written_as(KeyRule rule, std::function<json(const Writing&)> write) {
  rule.write = std::move(write);
  return rule;
}

// The table's rule for `key`, its absent value changed (a family's own default).
void absent_default(std::vector<KeyRule>& t, const std::string& key, json absent) {
  const auto it = std::find_if(t.begin(), t.end(), [&](const KeyRule& k) { return k.key == key; });
  it->absent = std::move(absent);
}

// The routing keys of mixtral, qwen2_moe and qwen3_moe (experts: the key of their number), and
// their training keys into HfRouterKeys (hf_config.hpp: what the trainer makes of them).
std::vector<KeyRule> expert_keys(const char* experts, int n_experts, int top_k) {
  const auto fixed = [](int n) { return [n](const ModelConfig&) { return n; }; };
  const HfRouterKeys defaults;  // transformers' (MixtralConfig, Qwen3MoeConfig)
  return {count(experts, &ModelConfig::n_experts, fixed(n_experts)),
          count("num_experts_per_tok", &ModelConfig::top_k, fixed(top_k)),
          {"router_aux_loss_coef", HfKeyUse::Implemented, json(defaults.aux_loss_coef),
           [](const std::string& k, const json& v, Reading& r) {
             require_json_kind(v.is_number(), v, r.file, k, "a number");
             if (!(v.get<double>() >= 0)) refuse(r, k, v, "must be a number >= 0");
             r.router.aux_loss_coef = v.get<double>();
           },
           [](const Writing& w) { return json(w.router.aux_loss_coef); }},
          {"output_router_logits", HfKeyUse::Implemented, json(defaults.output_router_logits),
           [](const std::string& k, const json& v, Reading& r) {
             require_json_kind(v.is_boolean(), v, r.file, k, "a boolean");
             r.router.output_router_logits = v.get<bool>();
           },
           [](const Writing&) { return json(false); }}};
}

// qwen2_moe's shared_expert_intermediate_size (after moe_intermediate_size): the width of its one
// gated shared expert, the trainer's n_shared_experts x the experts' width (another refused).
KeyRule shared_expert_width() {
  return {"shared_expert_intermediate_size", HfKeyUse::Implemented, json(5632),
          [](const std::string& k, const json& v, Reading& r) {
            const int width = positive_int(k, v, r), expert = r.c.expert_width();
            if (width % expert != 0)
              refuse(r, k, v,
                     "not a multiple of moe_intermediate_size (" + std::to_string(expert) +
                         "): the trainer's shared experts are n-shared-experts x its width");
            r.c.n_shared_experts = width / expert;
          },
          [](const Writing& w) { return json(w.c.n_shared_experts * w.c.expert_width()); }};
}

// qwen3_moe's and qwen2_moe's mlp_only_layers (after num_hidden_layers and decoder_sparse_step):
// dense layers by index. Those the step makes sparse must be the first ones it makes sparse, all
// of them up to the last listed: moe_first_dense (the others the step leaves dense anyway), so
// that the model is the same; another set is refused. The export writes
// [0, ..., moe_first_dense - 1].
KeyRule mlp_only_layers() {
  return {"mlp_only_layers", HfKeyUse::Implemented, json::array(),
          [](const std::string& k, const json& v, Reading& r) {
            if (v.is_null()) return;
            require_json_kind(v.is_array(), v, r.file, k, "an array of layer indices");
            std::vector<bool> listed(static_cast<size_t>(r.c.n_layer), false);
            int first_dense = 0;  // past the last layer the list keeps dense against the step
            for (const json& l : v) {
              if (!l.is_number_integer() || l.get<int64_t>() < 0 ||
                  l.get<int64_t>() >= r.c.n_layer)
                refuse(r, k, v, "its entries must be layer indices in [0, num_hidden_layers)");
              const int layer = l.get<int>();
              listed[static_cast<size_t>(layer)] = true;
              if ((layer + 1) % r.c.moe_every == 0) first_dense = std::max(first_dense, layer + 1);
            }
            for (int l = 0; l < first_dense; ++l)
              if ((l + 1) % r.c.moe_every == 0 && !listed[static_cast<size_t>(l)])
                refuse(r, k, v,
                       "layer " + std::to_string(l) + " is sparse at decoder_sparse_step " +
                           std::to_string(r.c.moe_every) +
                           " and a later one dense: dense layers "
                           "other than the first ones (moe-first-dense) and those the step "
                           "leaves are not implemented");
            r.c.moe_first_dense = first_dense;
          },
          [](const Writing& w) {  // the first layers, which moe-first-dense keeps dense
            json layers = json::array();
            for (int l = 0; l < w.c.moe_first_dense; ++l) layers.push_back(l);
            return layers;
          }};
}

// --- the table --------------------------------------------------------------------------------

// Keys every model_type has that change nothing computed.
std::vector<KeyRule> common_keys(const char* architecture) {
  const auto token = [](const Writing& w) { return w.token ? json(*w.token) : json(); };
  return {inert_value("architectures", json::array({architecture})),
          inert_value("torch_dtype", "float32"),
          inert("dtype"),  // newer transformers' name for torch_dtype
          inert("transformers_version"),
          inert("_name_or_path"),
          inert("bos_token_id", token),
          inert("eos_token_id", token),
          inert("pad_token_id"),
          inert_value("use_cache", true),
          inert_value("initializer_range", 0.02)};
}

std::vector<KeyRule> gpt2_keys() {
  std::vector<KeyRule> t = common_keys("GPT2LMHeadModel");
  const std::vector<KeyRule> own = {
      count("n_layer", &ModelConfig::n_layer),
      {"n_head", HfKeyUse::Implemented, std::nullopt,
       [](const std::string& k, const json& v, Reading& r) {
         r.c.n_head = r.c.n_kv_head = positive_int(k, v, r);
       },
       [](const Writing& w) { return json(w.c.n_head); }},
      count("n_embd", &ModelConfig::d_model),
      count("n_inner", &ModelConfig::d_ff, [](const ModelConfig& c) { return 4 * c.d_model; }),
      count("n_positions", &ModelConfig::max_seq_len),
      count("vocab_size", &ModelConfig::vocab_size),
      positive("layer_norm_epsilon", &ModelConfig::norm_eps, 1e-5f),
      refused_unless("activation_function", {"gelu_new", "gelu_pytorch_tanh"},
                     "the model computes the tanh GELU (gelu_new) only"),
      flag("tie_word_embeddings", true, &ModelConfig::tie_embeddings),
      flag("scale_attn_weights", true, &ModelConfig::scale_attn_weights),
      flag("scale_attn_by_inverse_layer_idx", false,
           &ModelConfig::scale_attn_by_inverse_layer_idx),
      refused_unless("add_cross_attention", {false}, "cross-attention is not implemented"),
      inert_value("reorder_and_upcast_attn", false),  // fp16 numerics only: the same function
      inert("n_ctx", [](const Writing& w) { return json(w.c.max_seq_len); }),  // unused by HF
      inert_value("attn_pdrop", 0.0),  // dropout: the trainer trains without it
      inert_value("embd_pdrop", 0.0),
      inert_value("resid_pdrop", 0.0),
      inert_value("summary_type", "cls_index"),  // summary_*: GPT2DoubleHeadsModel's head
      inert_value("summary_use_proj", true),
      inert_value("summary_activation", json()),
      inert_value("summary_proj_to_labels", true),
      inert_value("summary_first_dropout", 0.1),
      inert("task_specific_params")};
  t.insert(t.begin(), own.begin(), own.end());
  t.push_back(model_type("gpt2", Arch::Gpt2));
  return t;
}

// num_key_value_heads: absent, the config class's default (kv_heads_absent: a count, or null);
// null, one per query head, as every transformers config of the llama family sets it.
KeyRule kv_heads(json kv_heads_absent) {
  return {"num_key_value_heads", HfKeyUse::Implemented, std::move(kv_heads_absent),
          [](const std::string& k, const json& v, Reading& r) {
            r.c.n_kv_head = v.is_null() ? r.c.n_head : positive_int(k, v, r);
          },
          [](const Writing& w) { return json(w.c.n_kv_head); }};
}

// The llama architecture's keys, shared by llama, mistral, qwen2 and qwen3. kv_heads_absent:
// the number of key/value heads transformers takes when the key is absent (null: one per head).
std::vector<KeyRule> llama_family_keys(const char* architecture, json head_dim_absent,
                                       json kv_heads_absent) {
  std::vector<KeyRule> t = {
      count("num_hidden_layers", &ModelConfig::n_layer),
      count("num_attention_heads", &ModelConfig::n_head),
      kv_heads(std::move(kv_heads_absent)),
      count("hidden_size", &ModelConfig::d_model),
      count("intermediate_size", &ModelConfig::d_ff),
      count("max_position_embeddings", &ModelConfig::max_seq_len),
      count("vocab_size", &ModelConfig::vocab_size),
      positive("rms_norm_eps", &ModelConfig::norm_eps, 1e-6f),
      positive("rope_theta", &ModelConfig::rope_theta, 10000.0f),
      head_dim(std::move(head_dim_absent)),
      refused_unless("hidden_act", {"silu"}, "the model computes SiLU (SwiGLU) only"),
      flag("tie_word_embeddings", false, &ModelConfig::tie_embeddings),
      rope_scaling(),
      rope_parameters(),  // after rope_theta and rope_scaling, which it must agree with
      inert_value("attention_dropout", 0.0)};  // the trainer trains without dropout
  const std::vector<KeyRule> common = common_keys(architecture);
  t.insert(t.end(), common.begin(), common.end());
  return t;
}

std::vector<KeyRule> sliding_keys() {  // qwen2's and qwen3's: no sliding window unless asked
  return {refused_unless("use_sliding_window", {false},
                         "a sliding window on the layers from max_window_layers on only is not "
                         "implemented (the trainer's sliding-window covers every layer)"),
          inert("sliding_window"),     // used only with use_sliding_window
          inert("max_window_layers"),  // the same
          layer_types()};
}

// The table of a model_type (empty: unknown). model_type comes last: a refused one (a feature
// the model lacks) is named after the refused values of the other keys.
std::vector<KeyRule> table(const std::string& type) {
  const auto fixed = [](int n) { return [n](const ModelConfig&) { return n; }; };
  std::vector<KeyRule> t;
  if (type == "gpt2") return gpt2_keys();
  if (type == "llama") {
    t = llama_family_keys("LlamaForCausalLM", json(), json());
    t.push_back(attention_bias());
    t.push_back(flag("mlp_bias", false, &ModelConfig::mlp_bias));
    t.push_back(refused_unless("pretraining_tp", {1}, "only 1 is accepted"));
    t.push_back(model_type("llama", Arch::Llama));
  } else if (type == "mistral") {
    t = llama_family_keys("MistralForCausalLM", json(), 8);
    t.push_back(sliding_window(4096));
    t.push_back(model_type("mistral", Arch::Llama));
  } else if (type == "qwen2") {
    t = llama_family_keys("Qwen2ForCausalLM", json(), 32);
    const std::vector<KeyRule> s = sliding_keys();
    t.insert(t.end(), s.begin(), s.end());
    t.push_back(refused_unless("use_mrope", {false}, "multimodal RoPE is not implemented"));
    t.push_back(model_type("qwen2", Arch::Llama, [](ModelConfig& c) { c.qkv_bias = true; }));
  } else if (type == "qwen3") {
    t = llama_family_keys("Qwen3ForCausalLM", json(128), 32);
    const std::vector<KeyRule> s = sliding_keys();
    t.insert(t.end(), s.begin(), s.end());
    t.push_back(attention_bias());
    t.push_back(model_type("qwen3", Arch::Llama, [](ModelConfig& c) { c.qk_norm = true; }));
  } else if (type == "phi3") {  // llama with q/k/v and gate/up fused (read by hf_model.cpp)
    t = llama_family_keys("Phi3ForCausalLM", json(), json());
    absent_default(t, "rms_norm_eps", 1e-5);  // Phi3Config's
    t.push_back(sliding_window(json()));
    // Phi3ForCausalLM has no attention biases whatever attention_bias says
    t.push_back(inert_value("attention_bias", false));
    t.push_back(inert_value("resid_pdrop", 0.0));  // dropout rates, as attention_dropout
    t.push_back(inert_value("embd_pdrop", 0.0));
    t.push_back(inert("original_max_position_embeddings"));  // longrope's, which is refused
    t.push_back(inert("auto_map"));  // the Hub's remote-code classes: transformers' own run
    t.push_back(refused_unless("partial_rotary_factor", {1.0},
                               "RoPE on part of each head is not implemented"));
    t.push_back(model_type("phi3", Arch::Llama));
  } else if (type == "mixtral") {  // every layer MoE, of experts intermediate_size wide
    t = llama_family_keys("MixtralForCausalLM", json(), 8);
    absent_default(t, "rope_theta", 1e6);
    absent_default(t, "rms_norm_eps", 1e-5);  // MixtralConfig's, where LlamaConfig's is 1e-6
    for (KeyRule& k : t)
      if (k.key == "intermediate_size")
        k = written_as(std::move(k), [](const Writing& w) { return json(w.c.expert_width()); });
    const std::vector<KeyRule> e = expert_keys("num_local_experts", 8, 2);
    t.insert(t.end(), e.begin(), e.end());
    t.push_back(refused_unless("router_jitter_noise", {0.0},
                               "router jitter (noise on the router's input) is not implemented"));
    t.push_back(sliding_window(json()));
    t.push_back(model_type("mixtral", Arch::Llama));
  } else if (type == "qwen2_moe") {  // qwen2 whose MoE layers add one gated shared expert
    t = llama_family_keys("Qwen2MoeForCausalLM", json(), 16);
    const std::vector<KeyRule> s = sliding_keys();
    t.insert(t.end(), s.begin(), s.end());
    t.push_back(flag("qkv_bias", true, &ModelConfig::qkv_bias));  // on q, k and v (o: none)
    const std::vector<KeyRule> e = expert_keys("num_experts", 60, 4);
    t.insert(t.end(), e.begin(), e.end());
    t.push_back(written_as(count("moe_intermediate_size", &ModelConfig::moe_ff, fixed(1408)),
                           [](const Writing& w) { return json(w.c.expert_width()); }));
    t.push_back(shared_expert_width());
    t.push_back(count("decoder_sparse_step", &ModelConfig::moe_every, fixed(1)));
    t.push_back(mlp_only_layers());
    t.push_back(flag("norm_topk_prob", false, &ModelConfig::moe_norm_topk));
    t.push_back(
        model_type("qwen2_moe", Arch::Llama, [](ModelConfig& c) { c.moe_shared_gate = true; }));
  } else if (type == "qwen3_moe") {  // qwen3 whose MLPs are MoE every decoder_sparse_step layers
    t = llama_family_keys("Qwen3MoeForCausalLM", json(), 4);
    const std::vector<KeyRule> s = sliding_keys();
    t.insert(t.end(), s.begin(), s.end());
    t.push_back(attention_bias());
    const std::vector<KeyRule> e = expert_keys("num_experts", 128, 8);
    t.insert(t.end(), e.begin(), e.end());
    t.push_back(written_as(count("moe_intermediate_size", &ModelConfig::moe_ff, fixed(768)),
                           [](const Writing& w) { return json(w.c.expert_width()); }));
    t.push_back(count("decoder_sparse_step", &ModelConfig::moe_every, fixed(1)));
    t.push_back(mlp_only_layers());
    t.push_back(flag("norm_topk_prob", false, &ModelConfig::moe_norm_topk));
    t.push_back(model_type("qwen3_moe", Arch::Llama, [](ModelConfig& c) { c.qk_norm = true; }));
  }
  return t;
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw UsageError(file.string() + ": cannot open: " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw UsageError(file.string() + ": cannot read: " + std::strerror(errno));
  return parse_json_input(text, file.string());
}

}  // namespace

std::string read_hf_model_type(const std::string& dir) {
  const fs::path file = fs::path(dir) / kConfig;
  const std::optional<std::string> type =
      JsonFields(read_json(file), file.string()).string("model_type");
  if (!type) throw UsageError(file.string() + ": needs a string 'model_type'");
  return *type;
}

ModelConfig read_hf_config(const std::string& dir, HfRouterKeys* router) {
  const fs::path file = fs::path(dir) / kConfig;
  const json doc = read_json(file);
  const std::optional<std::string> type = JsonFields(doc, file.string()).string("model_type");
  if (!type) throw UsageError(file.string() + ": needs a string 'model_type'");
  const std::vector<KeyRule> rules = table(*type);
  if (rules.empty())
    throw UsageError(file.string() + ": model_type '" + *type +
                     "'; gpt2, llama, mistral, qwen2, qwen3, phi3, mixtral, qwen2_moe or "
                     "qwen3_moe only");
  Reading r{file.string(), doc, {}, {}};
  r.c.set_arch(*type == "gpt2" ? Arch::Gpt2 : Arch::Llama);  // its defaults, then the keys
  for (const auto& [key, value] : doc.items())
    if (std::none_of(rules.begin(), rules.end(), [&](const KeyRule& k) { return k.key == key; }))
      refuse(r, key, value,
             "a key the trainer does not know for model_type " + *type +
                 ": refused rather than ignored, as it may change the model");
  for (const KeyRule& rule : rules) {
    const auto it = doc.find(rule.key);
    if (it != doc.end()) {
      rule.read(rule.key, *it, r);
    } else {
      if (!rule.absent) throw UsageError(file.string() + ": needs '" + rule.key + "'");
      rule.read(rule.key, *rule.absent, r);
    }
  }
  try {
    r.c.validate();
  } catch (const UsageError& e) {
    throw UsageError(file.string() + " describes an invalid model: " + e.what());
  }
  if (router) *router = r.router;
  return r.c;
}

std::string hf_model_type(const ModelConfig& c) {
  if (c.arch == Arch::Gpt2) return "gpt2";
  if (c.n_experts > 0) return c.moe_shared_gate ? "qwen2_moe" : c.qk_norm ? "qwen3_moe" : "mixtral";
  if (c.qk_norm) return "qwen3";
  if (c.qkv_bias && !c.proj_bias) return "qwen2";
  // LlamaConfig has no window: a llama config.json would lose it
  return c.sliding_window > 0 && !c.proj_bias && !c.mlp_bias ? "mistral" : "llama";
}

json hf_config_json(const ModelConfig& config, std::optional<uint32_t> document_token,
                    const HfRouterKeys& router) {
  const Writing w{config, document_token, router};
  json doc = json::object();
  for (const KeyRule& rule : table(hf_model_type(config)))
    if (rule.write) doc[rule.key] = rule.write(w);
  return doc;
}

std::vector<std::pair<std::string, HfKeyUse>> hf_config_keys(const std::string& model_type) {
  std::vector<std::pair<std::string, HfKeyUse>> keys;
  for (const KeyRule& rule : table(model_type)) keys.emplace_back(rule.key, rule.use);
  return keys;
}

}  // namespace mpitrain
