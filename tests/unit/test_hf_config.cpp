// The config.json table (model/hf_config.hpp): every key of the real checkpoints' configs
// (tests/support/hf_configs, Mixtral's and Qwen3-MoE's included) is classified; an unknown key,
// and each value that would change the model silently, is refused naming the file, the key and the value; the export's config reads
// back as the same model, epsilons as the decimal given.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpitrain/model/hf_config.hpp"
#include "mpitrain/runtime/error.hpp"
#include "small_llama.hpp"

using namespace mpitrain;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* const kRealConfigs[] = {
    "gpt2",          "Llama-3.2-1B",           "Qwen2.5-0.5B",
    "Qwen3-0.6B",    "Mistral-7B-v0.1",        "Mixtral-8x7B-v0.1",
    "Qwen3-30B-A3B", "Qwen1.5-MoE-A2.7B-Chat", "Phi-3-medium-4k-instruct"};

json real_config(const std::string& name) {
  std::ifstream in(fs::path(MPITRAIN_HF_CONFIGS) / (name + ".json"));
  EXPECT_TRUE(in) << name;
  return json::parse(in);
}

class HfConfigTest : public ::testing::Test {  // a fresh temporary directory per test
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mpitrain-hfcfg-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file() const { return (dir_ / "config.json").string(); }

  // The error of reading doc as config.json ("" if it reads).
  std::string error(const json& doc) const {
    std::ofstream(file()) << doc.dump(2);
    try {
      read_hf_config(dir_.string());
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  ModelConfig read(const json& doc) const {
    std::ofstream(file()) << doc.dump(2);
    return read_hf_config(dir_.string());
  }

  fs::path dir_;
};

TEST_F(HfConfigTest, EveryKeyOfTheRealConfigsIsInTheTable) {
  for (const char* name : kRealConfigs) {
    const json doc = real_config(name);
    const auto keys = hf_config_keys(doc["model_type"]);
    ASSERT_FALSE(keys.empty()) << name;
    for (const auto& [key, value] : doc.items())
      EXPECT_TRUE(std::any_of(keys.begin(), keys.end(), [&](auto& k) { return k.first == key; }))
          << name << ": " << key << " is not in the table";
  }
}

// Each real config reads, with the features of its family.
TEST_F(HfConfigTest, RealConfigsReadWithTheirFeatures) {
  using Rope = ModelConfig::RopeScaling::Type;
  const ModelConfig gpt2 = read(real_config("gpt2"));
  EXPECT_EQ(gpt2.arch, Arch::Gpt2);
  EXPECT_EQ(gpt2.n_layer, 12);
  EXPECT_EQ(gpt2.n_kv_head, 12);
  EXPECT_EQ(gpt2.d_ff, 4 * 768);
  EXPECT_EQ(gpt2.vocab_size, 50257);
  EXPECT_EQ(gpt2.norm_eps, 1e-5f);
  EXPECT_TRUE(gpt2.tie_embeddings && gpt2.qkv_bias && gpt2.proj_bias && gpt2.mlp_bias);
  const ModelConfig mistral = read(real_config("Mistral-7B-v0.1"));
  EXPECT_EQ(mistral.arch, Arch::Llama);
  EXPECT_EQ(mistral.n_kv_head, 8);
  EXPECT_EQ(mistral.d_ff, 14336);
  EXPECT_EQ(mistral.max_seq_len, 32768);
  EXPECT_EQ(mistral.norm_eps, 1e-5f);
  EXPECT_EQ(mistral.rope_theta, 10000.0f);
  EXPECT_FALSE(mistral.tie_embeddings || mistral.qkv_bias || mistral.proj_bias ||
               mistral.mlp_bias || mistral.qk_norm);
  const ModelConfig llama = read(real_config("Llama-3.2-1B"));  // tied, Llama 3 RoPE scaling
  EXPECT_TRUE(llama.tie_embeddings);
  EXPECT_FALSE(llama.qkv_bias || llama.proj_bias || llama.mlp_bias || llama.qk_norm);
  EXPECT_EQ(llama.head_size(), 64);
  EXPECT_EQ(llama.rope_scaling.type, Rope::Llama3);
  EXPECT_EQ(llama.rope_scaling.factor, 32.0f);
  EXPECT_EQ(llama.rope_scaling.low_freq_factor, 1.0f);
  EXPECT_EQ(llama.rope_scaling.high_freq_factor, 4.0f);
  EXPECT_EQ(llama.rope_scaling.original_max_position, 8192);
  const ModelConfig qwen2 = read(real_config("Qwen2.5-0.5B"));  // q/k/v biases, tied
  EXPECT_TRUE(qwen2.tie_embeddings && qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.proj_bias || qwen2.mlp_bias || qwen2.qk_norm);
  EXPECT_EQ(qwen2.head_size(), 64);
  const ModelConfig qwen3 = read(real_config("Qwen3-0.6B"));  // q/k norms, head_dim 128 of 1024
  EXPECT_TRUE(qwen3.tie_embeddings && qwen3.qk_norm);
  EXPECT_FALSE(qwen3.qkv_bias || qwen3.proj_bias || qwen3.mlp_bias);
  EXPECT_EQ(qwen3.head_size(), 128);
  EXPECT_EQ(qwen3.d_model, 1024);
  EXPECT_EQ(qwen3.rope_scaling.type, Rope::None);
  EXPECT_EQ(qwen3.n_experts, 0);
  const ModelConfig mixtral = read(real_config("Mixtral-8x7B-v0.1"));  // 8 experts, top 2
  EXPECT_EQ(mixtral.arch, Arch::Llama);
  EXPECT_EQ(mixtral.n_experts, 8);
  EXPECT_EQ(mixtral.top_k, 2);
  EXPECT_EQ(mixtral.expert_width(), 14336);
  EXPECT_EQ(mixtral.moe_every, 1);
  EXPECT_EQ(mixtral.n_shared_experts, 0);
  EXPECT_EQ(mixtral.n_kv_head, 8);
  EXPECT_EQ(mixtral.rope_theta, 1e6f);
  EXPECT_FALSE(mixtral.tie_embeddings || mixtral.qkv_bias || mixtral.proj_bias ||
               mixtral.mlp_bias || mixtral.qk_norm);
  // Absent, each family's epsilon is transformers' default: MixtralConfig's 1e-5, where the
  // other llama-family configs' is 1e-6.
  for (const auto& [name, eps] : {std::pair{"Mixtral-8x7B-v0.1", 1e-5f},
                                  {"Llama-3.2-1B", 1e-6f},
                                  {"Mistral-7B-v0.1", 1e-6f},
                                  {"Qwen3-30B-A3B", 1e-6f}}) {
    json doc = real_config(name);
    doc.erase("rms_norm_eps");
    EXPECT_EQ(read(doc).norm_eps, eps) << name;
  }
  // num_key_value_heads null is one per query head (transformers' configs set it so); absent,
  // the class's default: LlamaConfig's null, MistralConfig's 8.
  for (const char* name : {"Llama-3.2-1B", "Mistral-7B-v0.1", "Qwen2.5-0.5B", "Qwen3-0.6B",
                           "Mixtral-8x7B-v0.1", "Qwen3-30B-A3B"}) {
    json doc = real_config(name);
    doc["num_key_value_heads"] = nullptr;
    const ModelConfig c = read(doc);
    EXPECT_EQ(c.n_kv_head, c.n_head) << name;
  }
  for (const auto& [name, heads] : {std::pair{"Llama-3.2-1B", 32}, {"Mistral-7B-v0.1", 8}}) {
    json doc = real_config(name);
    doc.erase("num_key_value_heads");
    EXPECT_EQ(read(doc).n_kv_head, heads) << name;
  }
  const ModelConfig qwen3_moe = read(real_config("Qwen3-30B-A3B"));  // 128 experts of 768, top 8
  EXPECT_TRUE(qwen3_moe.qk_norm);
  EXPECT_FALSE(qwen3_moe.tie_embeddings || qwen3_moe.qkv_bias || qwen3_moe.proj_bias);
  EXPECT_EQ(qwen3_moe.n_experts, 128);
  EXPECT_EQ(qwen3_moe.top_k, 8);
  EXPECT_EQ(qwen3_moe.expert_width(), 768);
  EXPECT_EQ(qwen3_moe.d_ff, 6144);
  EXPECT_EQ(qwen3_moe.moe_every, 1);
  EXPECT_EQ(qwen3_moe.n_kv_head, 4);
  EXPECT_EQ(qwen3_moe.head_size(), 128);
  json sparse = real_config("Qwen3-30B-A3B");  // MoE every second layer, the others dense
  sparse["decoder_sparse_step"] = 2;
  const ModelConfig every2 = read(sparse);
  EXPECT_FALSE(every2.is_moe_layer(0));
  EXPECT_TRUE(every2.is_moe_layer(1));
  EXPECT_EQ(every2.dense_mlp_width(0), 6144);
  // 60 experts of 1408, top 4, unnormalised, and a shared expert of 5632 = 4 x 1408 gated
  const ModelConfig qwen2_moe = read(real_config("Qwen1.5-MoE-A2.7B-Chat"));
  EXPECT_TRUE(qwen2_moe.moe_shared_gate && qwen2_moe.qkv_bias);  // qkv_bias absent: true
  EXPECT_FALSE(qwen2_moe.proj_bias || qwen2_moe.qk_norm || qwen2_moe.moe_norm_topk);
  EXPECT_EQ(qwen2_moe.n_experts, 60);
  EXPECT_EQ(qwen2_moe.top_k, 4);
  EXPECT_EQ(qwen2_moe.expert_width(), 1408);
  EXPECT_EQ(qwen2_moe.n_shared_experts, 4);
  EXPECT_EQ(qwen2_moe.dense_mlp_width(0), 5632);
  EXPECT_EQ(qwen2_moe.n_kv_head, 16);
  // Phi-3: the llama architecture (its fused tensors are the checkpoint's business), GQA 40 / 10,
  // a window of 2047, Phi3Config's epsilon when absent; exported as the mistral model it is
  json phi3_doc = real_config("Phi-3-medium-4k-instruct");
  const ModelConfig phi3 = read(phi3_doc);
  EXPECT_EQ(phi3.n_head, 40);
  EXPECT_EQ(phi3.n_kv_head, 10);
  EXPECT_EQ(phi3.sliding_window, 2047);
  EXPECT_FALSE(phi3.qkv_bias || phi3.proj_bias || phi3.mlp_bias || phi3.tie_embeddings);
  EXPECT_EQ(hf_model_type(phi3), "mistral");
  phi3_doc.erase("rms_norm_eps");
  EXPECT_EQ(read(phi3_doc).norm_eps, 1e-5f);
  phi3_doc["partial_rotary_factor"] = 0.5;
  EXPECT_NE(error(phi3_doc).find("partial_rotary_factor = 0.5: RoPE on part of each head is not "
                                 "implemented"),
            std::string::npos)
      << error(phi3_doc);
  phi3_doc.erase("partial_rotary_factor");
  phi3_doc["rope_scaling"] = {
      {"type", "longrope"}, {"short_factor", {1.0}}, {"long_factor", {1.0}}};
  EXPECT_NE(error(phi3_doc).find("rope_scaling"), std::string::npos) << error(phi3_doc);
}

// The silent changes, now read as the model they describe.
TEST_F(HfConfigTest, FeaturesOnceDroppedAreRead) {
  json llama = real_config("Llama-3.2-1B");
  llama["attention_bias"] = true;
  llama["mlp_bias"] = true;
  llama["head_dim"] = 128;
  llama["tie_word_embeddings"] = false;
  const ModelConfig l = read(llama);
  EXPECT_TRUE(l.qkv_bias && l.proj_bias && l.mlp_bias);
  EXPECT_FALSE(l.tie_embeddings);
  EXPECT_EQ(l.head_size(), 128);
  json gpt2 = real_config("gpt2");
  gpt2["tie_word_embeddings"] = false;
  gpt2["scale_attn_weights"] = false;
  gpt2["scale_attn_by_inverse_layer_idx"] = true;
  const ModelConfig g = read(gpt2);
  EXPECT_FALSE(g.tie_embeddings || g.scale_attn_weights);
  EXPECT_TRUE(g.scale_attn_by_inverse_layer_idx);
  json qwen3 = real_config("Qwen3-0.6B");
  qwen3["attention_bias"] = true;  // Qwen3Attention: on q, k, v and o
  const ModelConfig q = read(qwen3);
  EXPECT_TRUE(q.qkv_bias && q.proj_bias && q.qk_norm);
  json linear = real_config("Mistral-7B-v0.1");
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // the older key name
  EXPECT_EQ(read(linear).rope_scaling.type, ModelConfig::RopeScaling::Type::Linear);
  EXPECT_EQ(read(linear).rope_scaling.factor, 2.0f);
  linear["rope_scaling"] = {{"rope_type", "default"}};  // transformers' name for none
  EXPECT_EQ(read(linear).rope_scaling.type, ModelConfig::RopeScaling::Type::None);
}

// Qwen3's documented YaRN (its README: factor 4 over 32768 positions, max_position_embeddings
// left at 40960): read as given, transformers' defaults for the rest, written back as read.
TEST_F(HfConfigTest, YarnIsReadAsQwenDocumentsIt) {
  using Type = ModelConfig::RopeScaling::Type;
  json qwen3 = real_config("Qwen3-0.6B");
  const json documented = {
      {"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768}};
  qwen3["rope_scaling"] = documented;
  const ModelConfig q = read(qwen3);
  EXPECT_EQ(q.rope_scaling.type, Type::Yarn);
  EXPECT_EQ(to_string(q.rope_scaling), "yarn:factor=4,orig=32768,beta_fast=32,beta_slow=1");
  EXPECT_EQ(q.max_seq_len, 40960);
  EXPECT_EQ(hf_config_json(q, 1)["rope_scaling"], documented);
  qwen3["rope_scaling"] = {{"type", "yarn"},  // the older key; absent orig: max_position
                           {"factor", 2.0},
                           {"beta_fast", nullptr},
                           {"attention_factor", nullptr},
                           {"truncate", true}};
  EXPECT_EQ(to_string(read(qwen3).rope_scaling),
            "yarn:factor=2,orig=40960,beta_fast=32,beta_slow=1");
}

// transformers 5 saves rope_theta and rope_scaling as one dict, rope_parameters: read as the two.
TEST_F(HfConfigTest, Transformers5RopeParametersAreTheOlderKeys) {
  const json llama = real_config("Llama-3.2-1B");
  json v5 = llama;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = llama["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = llama["rope_theta"];
  const ModelConfig older = read(llama), newer = read(v5);
  EXPECT_EQ(newer.rope_theta, 500000.0f);
  EXPECT_EQ(to_string(newer.rope_scaling), to_string(older.rope_scaling));
  EXPECT_EQ(hf_config_json(newer, 1), hf_config_json(older, 1));  // exported as the older keys
  v5["rope_theta"] = llama["rope_theta"];  // the older keys beside it, agreeing
  v5["rope_scaling"] = llama["rope_scaling"];
  EXPECT_EQ(to_string(read(v5).rope_scaling), to_string(older.rope_scaling));
  json qwen3 = real_config("Qwen3-0.6B");  // TRL's YaRN for Qwen3, as its docs give it
  qwen3["rope_parameters"] = {{"rope_type", "yarn"},
                              {"rope_theta", 1000000},
                              {"factor", 4.0},
                              {"original_max_position_embeddings", 40960}};
  EXPECT_EQ(to_string(read(qwen3).rope_scaling),
            "yarn:factor=4,orig=40960,beta_fast=32,beta_slow=1");
  qwen3.erase("rope_theta");
  qwen3["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
  EXPECT_EQ(read(qwen3).rope_theta, 250000.0f);
  EXPECT_EQ(read(qwen3).rope_scaling.type, ModelConfig::RopeScaling::Type::None);
  qwen3["rope_parameters"] = {{"rope_theta", 250000.0}};  // no rope_type: default
  EXPECT_EQ(read(qwen3).rope_theta, 250000.0f);
  EXPECT_EQ(read(qwen3).rope_scaling.type, ModelConfig::RopeScaling::Type::None);
}

TEST_F(HfConfigTest, UnknownKeyIsRefused) {
  json doc = real_config("gpt2");
  doc["quantization_config"] = {{"quant_method", "bitsandbytes"}};
  EXPECT_EQ(error(doc), file() + ": quantization_config = {\"quant_method\":\"bitsandbytes\"}: a "
                                 "key the trainer does not know for model_type gpt2: refused "
                                 "rather than ignored, as it may change the model");
  json mistral = real_config("Mistral-7B-v0.1");
  mistral["attention_bias"] = false;  // not a key of MistralConfig: transformers ignores it
  EXPECT_NE(error(mistral).find("attention_bias = false: a key the trainer does not know"),
            std::string::npos);
}

// The values of features the model lacks: exit 2 (a UsageError) naming the file, the key and the
// value.
TEST_F(HfConfigTest, ValuesThatWouldChangeTheModelAreRefused) {
  struct Case {
    const char* config;
    const char* key;
    json value;
  };
  const Case cases[] = {
      {"Mistral-7B-v0.1", "sliding_window", 0},
      {"Mistral-7B-v0.1", "hidden_act", "gelu"},
      {"Mistral-7B-v0.1", "num_hidden_layers", 0},
      {"Mistral-7B-v0.1", "rope_scaling", {{"rope_type", "dynamic"}, {"factor", 2.0}}},
      {"Mistral-7B-v0.1", "rope_scaling", {{"rope_type", "default"}, {"factor", 2.0}}},
      {"Mistral-7B-v0.1",
       "rope_scaling",
       {{"rope_type", "yarn"}, {"factor", 2.0}, {"mscale", 0.707}, {"mscale_all_dim", 0.707}}},
      {"Mistral-7B-v0.1",
       "rope_scaling",
       {{"rope_type", "yarn"}, {"factor", 2.0}, {"truncate", false}}},
      {"Mistral-7B-v0.1",
       "rope_scaling",
       {{"rope_type", "yarn"}, {"factor", 2.0}, {"beta_fast", 0}}},
      {"Mistral-7B-v0.1",
       "rope_scaling",
       {{"rope_type", "yarn"}, {"original_max_position_embeddings", 4096}}},
      {"Mistral-7B-v0.1", "rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}, {"x", 1}}},
      {"Mistral-7B-v0.1", "rope_scaling", {{"rope_type", "llama3"}, {"factor", 8.0}}},
      // transformers 5's rope_parameters: per layer type, over part of each head, or disagreeing
      // with the file's rope_theta (Mistral's 10000) or rope_scaling (Llama 3.2's llama3)
      {"Mistral-7B-v0.1",
       "rope_parameters",
       {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 1e6}}}}},
      {"Mistral-7B-v0.1",
       "rope_parameters",
       {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}},
      {"Mistral-7B-v0.1", "rope_parameters", {{"rope_type", "default"}, {"rope_theta", 5e5}}},
      {"Mistral-7B-v0.1", "rope_parameters", {{"rope_type", "default"}, {"factor", 2.0}}},
      {"Llama-3.2-1B", "rope_parameters", {{"rope_type", "default"}}},
      {"Mistral-7B-v0.1", "rope_parameters", {{"rope_type", "dynamic"}, {"factor", 2.0}}},
      {"gpt2", "activation_function", "relu"},
      {"gpt2", "add_cross_attention", true},
      {"Qwen2.5-0.5B", "use_sliding_window", true},
      {"Qwen2.5-0.5B", "use_mrope", true},
      {"Qwen3-0.6B", "layer_types", {"full_attention", "sliding_attention"}},
      {"Mixtral-8x7B-v0.1", "sliding_window", -4096},
      {"Mixtral-8x7B-v0.1", "router_jitter_noise", 0.01},
      {"Qwen3-30B-A3B", "mlp_only_layers", {0, 2}},
      {"Qwen3-30B-A3B", "mlp_only_layers", {48}},
      {"Qwen3-30B-A3B", "mlp_only_layers", {"0"}},
      {"Qwen3-30B-A3B", "use_sliding_window", true},
  };
  for (const Case& c : cases) {
    json doc = real_config(c.config);
    doc[c.key] = c.value;
    const std::string e = error(doc);
    EXPECT_EQ(e.rfind(file() + ": " + c.key + " = " + c.value.dump() + ": ", 0), 0u)
        << c.config << " " << c.key << ": " << e;
  }
  const json llama = real_config("Llama-3.2-1B");
  for (const auto& [key, value] :
       std::map<std::string, json>{{"hidden_act", "gelu"}, {"pretraining_tp", 2}}) {
    json doc = llama;
    doc[key] = value;
    EXPECT_EQ(error(doc).rfind(file() + ": " + key + " = " + value.dump() + ": ", 0), 0u) << key;
  }
  EXPECT_EQ(error(llama), "");
  // norm_topk_prob: the gates renormalised (the real config's true) or not (false, and absent:
  // transformers' default); not a boolean is refused.
  json qwen3_moe = real_config("Qwen3-30B-A3B");
  EXPECT_TRUE(read(qwen3_moe).moe_norm_topk);
  qwen3_moe["norm_topk_prob"] = false;
  EXPECT_FALSE(read(qwen3_moe).moe_norm_topk);
  qwen3_moe.erase("norm_topk_prob");
  EXPECT_FALSE(read(qwen3_moe).moe_norm_topk);
  qwen3_moe["norm_topk_prob"] = 1;
  EXPECT_NE(error(qwen3_moe).find("norm_topk_prob"), std::string::npos);
  // Mixtral's default window is none; the aux-loss settings are the objective's, any
  // coefficient >= 0 and either switch read.
  json mixtral = real_config("Mixtral-8x7B-v0.1");
  mixtral.erase("sliding_window");
  mixtral["router_aux_loss_coef"] = 0.5;
  mixtral["output_router_logits"] = true;
  EXPECT_EQ(error(mixtral), "");
  mixtral["router_aux_loss_coef"] = -0.01;
  EXPECT_NE(error(mixtral).find("router_aux_loss_coef = -0.01: must be a number >= 0"),
            std::string::npos);
  mixtral["router_aux_loss_coef"] = "0.02";
  EXPECT_NE(error(mixtral).find("router_aux_loss_coef"), std::string::npos);
  // Qwen2-MoE's shared expert: a width the trainer holds as n x the experts' only.
  json qwen2_moe = real_config("Qwen1.5-MoE-A2.7B-Chat");
  qwen2_moe["shared_expert_intermediate_size"] = 5000;
  EXPECT_NE(error(qwen2_moe).find("shared_expert_intermediate_size = 5000: not a multiple of "
                                  "moe_intermediate_size (1408)"),
            std::string::npos)
      << error(qwen2_moe);
}

// Mistral's sliding window is the model's (absent: transformers' 4096; null, or absent in
// Mixtral's: none), and written back: the export is a mistral model, since a llama config.json
// has no window (transformers would attend over the whole sequence).
TEST_F(HfConfigTest, SlidingWindowIsKeptAndExportedAsMistral) {
  json mistral = real_config("Mistral-7B-v0.1");
  const ModelConfig c = read(mistral);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(hf_model_type(c), "mistral");
  const json doc = hf_config_json(c, 1);
  EXPECT_EQ(doc["model_type"], "mistral");
  EXPECT_EQ(doc["sliding_window"], 4096);
  EXPECT_EQ(read(doc).sliding_window, 4096);
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(read(mistral).sliding_window, 0);
  EXPECT_EQ(hf_model_type(read(mistral)), "llama");
  mistral.erase("sliding_window");
  EXPECT_EQ(read(mistral).sliding_window, 4096);
  EXPECT_EQ(read(real_config("Mixtral-8x7B-v0.1")).sliding_window, 0);
  ModelConfig with_biases = c;  // no mistral has biases: left a llama, refused at the export
  with_biases.proj_bias = true;
  EXPECT_EQ(hf_model_type(with_biases), "llama");
}

// A small llama model: 2 layers, 4 heads of 16, 2 kv heads, MLP width 128, vocabulary 300.
ModelConfig small_llama() { return test_models::small_llama(64, 128, 300, 32); }

TEST_F(HfConfigTest, ExportReadsBackWithEpsilonsAsGiven) {
  ModelConfig llama = small_llama();
  llama.norm_eps = 1e-5f;
  llama.rope_theta = 500000.0f;
  ModelConfig gpt2 = llama;
  gpt2.set_arch(Arch::Gpt2);
  gpt2.n_kv_head = 4;
  gpt2.norm_eps = 3e-6f;
  ModelConfig gpt2_untied = gpt2;  // and its attention-scale switches
  gpt2_untied.tie_embeddings = gpt2_untied.scale_attn_weights = false;
  gpt2_untied.scale_attn_by_inverse_layer_idx = true;
  ModelConfig llama3 = llama;  // tied, biases, its own head size, Llama 3's RoPE scaling
  llama3.tie_embeddings = llama3.qkv_bias = llama3.proj_bias = llama3.mlp_bias = true;
  llama3.head_dim = 32;
  llama3.rope_scaling = {ModelConfig::RopeScaling::Type::Llama3, 32.0f, 1.0f, 4.0f, 8192};
  ModelConfig qwen2 = llama;
  qwen2.qkv_bias = qwen2.tie_embeddings = true;
  qwen2.rope_scaling = parse_rope_scaling("yarn:factor=2.5,orig=24,beta_fast=16,attn=1.5");
  ModelConfig qwen3 = llama;
  qwen3.qk_norm = true;
  qwen3.head_dim = 32;
  qwen3.rope_scaling = {ModelConfig::RopeScaling::Type::Linear, 1.5f};
  EXPECT_EQ(hf_model_type(qwen2), "qwen2");
  EXPECT_EQ(hf_model_type(qwen3), "qwen3");
  EXPECT_EQ(hf_model_type(llama3), "llama");
  for (const ModelConfig& c : {llama, gpt2, gpt2_untied, llama3, qwen2, qwen3}) {
    const json doc = hf_config_json(c, 7);
    const std::string text = doc.dump(2);
    EXPECT_NE(text.find(c.arch == Arch::Llama ? "\"rms_norm_eps\": 1e-05"
                                              : "\"layer_norm_epsilon\": 3e-06"),
              std::string::npos)
        << text;
    EXPECT_EQ(doc["bos_token_id"], 7);
    const ModelConfig back = read(doc);
    EXPECT_EQ(back.arch, c.arch);
    EXPECT_EQ(back.n_layer, c.n_layer);
    EXPECT_EQ(back.n_head, c.n_head);
    EXPECT_EQ(back.n_kv_head, c.n_kv_head);
    EXPECT_EQ(back.d_model, c.d_model);
    EXPECT_EQ(back.d_ff, c.d_ff);
    EXPECT_EQ(back.vocab_size, c.vocab_size);
    EXPECT_EQ(back.max_seq_len, c.max_seq_len);
    EXPECT_EQ(back.norm_eps, c.norm_eps);
    EXPECT_EQ(back.tie_embeddings, c.tie_embeddings);
    EXPECT_EQ(back.qkv_bias, c.qkv_bias);
    EXPECT_EQ(back.proj_bias, c.proj_bias);
    EXPECT_EQ(back.mlp_bias, c.mlp_bias);
    EXPECT_EQ(back.head_size(), c.head_size());
    EXPECT_EQ(back.qk_norm, c.qk_norm);
    EXPECT_EQ(to_string(back.rope_scaling), to_string(c.rope_scaling));
    EXPECT_EQ(back.scale_attn_weights, c.scale_attn_weights);
    EXPECT_EQ(back.scale_attn_by_inverse_layer_idx, c.scale_attn_by_inverse_layer_idx);
    if (c.arch == Arch::Llama) {
      EXPECT_EQ(back.rope_theta, c.rope_theta);
    }
    if (hf_model_type(c) == "qwen2" || hf_model_type(c) == "qwen3") continue;
    // The full key set of the real config of its type (but the version of transformers and
    // gpt2's generation defaults, which are not the model's).
    const json real = real_config(c.arch == Arch::Llama ? "Llama-3.2-1B" : "gpt2");
    for (const auto& [key, value] : real.items())
      if (key != "transformers_version" && key != "task_specific_params") {
        EXPECT_TRUE(doc.contains(key)) << key << " is not exported";
      }
  }
  EXPECT_EQ(hf_config_json(llama, std::nullopt)["bos_token_id"], nullptr);
}

// An MoE model exports as mixtral (every layer MoE, no q/k norms) or qwen3_moe (q/k norms; dense
// layers between), with the real config's key set, and reads back as the same model.
TEST_F(HfConfigTest, ExpertsExportAsMixtralOrQwen3MoeAndReadBack) {
  ModelConfig mixtral = small_llama();
  mixtral.d_ff = 96;  // no layer is dense: exported as the experts' width
  mixtral.moe_ff = 128;
  mixtral.n_experts = 4;
  mixtral.top_k = 2;
  ModelConfig qwen3_moe = mixtral;
  qwen3_moe.qk_norm = true;
  qwen3_moe.head_dim = 32;
  qwen3_moe.n_experts = 8;
  qwen3_moe.top_k = 3;
  qwen3_moe.moe_every = 2;
  qwen3_moe.moe_norm_topk = false;
  EXPECT_EQ(hf_model_type(mixtral), "mixtral");
  EXPECT_EQ(hf_model_type(qwen3_moe), "qwen3_moe");
  for (const ModelConfig& c : {mixtral, qwen3_moe}) {
    const json doc = hf_config_json(c, 1);
    const ModelConfig back = read(doc);
    EXPECT_EQ(back.n_experts, c.n_experts);
    EXPECT_EQ(back.top_k, c.top_k);
    EXPECT_EQ(back.expert_width(), c.expert_width());
    EXPECT_EQ(back.moe_every, c.moe_every);
    EXPECT_EQ(back.moe_norm_topk, c.moe_norm_topk);
    EXPECT_EQ(back.qk_norm, c.qk_norm);
    EXPECT_EQ(back.head_size(), c.head_size());
    EXPECT_EQ(back.n_kv_head, c.n_kv_head);
    for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(back.dense_mlp_width(l), c.dense_mlp_width(l));
    const bool is_mixtral = hf_model_type(c) == "mixtral";
    EXPECT_EQ(doc["architectures"][0], is_mixtral ? "MixtralForCausalLM" : "Qwen3MoeForCausalLM");
    if (is_mixtral) {
      EXPECT_EQ(doc["intermediate_size"], 128);
      EXPECT_EQ(doc["sliding_window"], nullptr);
    } else {
      EXPECT_EQ(doc["norm_topk_prob"], false);
      EXPECT_EQ(doc["moe_intermediate_size"], 128);
      EXPECT_EQ(doc["intermediate_size"], 96);
    }
    // qwen3's inert sliding-window details aside, the real config's keys.
    const json real = real_config(is_mixtral ? "Mixtral-8x7B-v0.1" : "Qwen3-30B-A3B");
    for (const auto& [key, value] : real.items())
      if (key != "transformers_version" && key != "max_window_layers" && key != "sliding_window") {
        EXPECT_TRUE(doc.contains(key)) << key << " is not exported";
      }
  }
}

// router_aux_loss_coef and output_router_logits read into HfRouterKeys (absent: transformers'
// 0.001 and false), and the export writes the run's coefficient and false.
TEST_F(HfConfigTest, RouterLossKeysAreReadAndWritten) {
  HfRouterKeys router;
  std::ofstream(file()) << real_config("Mixtral-8x7B-v0.1").dump(2);
  read_hf_config(dir_.string(), &router);
  EXPECT_EQ(router.aux_loss_coef, 0.02);
  EXPECT_FALSE(router.output_router_logits);
  json qwen3_moe = real_config("Qwen3-30B-A3B");
  qwen3_moe["output_router_logits"] = true;
  qwen3_moe.erase("router_aux_loss_coef");
  std::ofstream(file()) << qwen3_moe.dump(2);
  read_hf_config(dir_.string(), &router);
  EXPECT_EQ(router.aux_loss_coef, 0.001);
  EXPECT_TRUE(router.output_router_logits);
  ModelConfig c = small_llama();
  c.n_experts = 4;
  c.top_k = 2;
  const json doc = hf_config_json(c, 1, HfRouterKeys{0.25, true});
  EXPECT_EQ(doc["router_aux_loss_coef"], 0.25);
  EXPECT_EQ(doc["output_router_logits"], false);
  EXPECT_EQ(hf_config_json(c, 1)["router_aux_loss_coef"], 0.001);
}

// qwen3_moe's mlp_only_layers reads where it names the first sparse layers (moe-first-dense) and
// layers decoder_sparse_step leaves dense; the export writes the first ones back, and
// transformers' rule (a layer is sparse unless listed, when the step makes it so) gives the same
// layers.
TEST_F(HfConfigTest, MlpOnlyLayersOfTheFirstLayersRead) {
  json doc = real_config("Qwen3-30B-A3B");
  doc["mlp_only_layers"] = {2, 0, 1};
  ModelConfig c = read(doc);
  EXPECT_EQ(c.moe_first_dense, 3);
  EXPECT_EQ(c.moe_layers(0, c.n_layer), c.n_layer - 3);
  for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(c.is_moe_layer(l), l >= 3) << l;
  EXPECT_EQ(hf_config_json(c, 1)["mlp_only_layers"], json({0, 1, 2}));
  doc["decoder_sparse_step"] = 2;  // sparse: 1, 3, 5, ...; listed 0-4: the first two sparse ones
  doc["mlp_only_layers"] = {0, 1, 2, 3, 4};
  c = read(doc);
  EXPECT_EQ(c.moe_first_dense, 4);
  for (int l = 0; l < c.n_layer; ++l) EXPECT_EQ(c.is_moe_layer(l), l >= 4 && l % 2 == 1) << l;
  doc["mlp_only_layers"] = {1, 5};  // 3 sparse between two dense ones
  EXPECT_NE(error(doc).find("mlp_only_layers = [1,5]: layer 3 is sparse at decoder_sparse_step 2 "
                            "and a later one dense"),
            std::string::npos)
      << error(doc);
}

// qwen3_moe's mlp_only_layers reads where it names only layers decoder_sparse_step leaves dense.
TEST_F(HfConfigTest, MlpOnlyLayersThatTheStepLeavesDenseRead) {
  json doc = real_config("Qwen3-30B-A3B");
  doc["decoder_sparse_step"] = 2;  // layers 1, 3, ... MoE
  doc["mlp_only_layers"] = {0, 2, 46};
  const ModelConfig c = read(doc);
  EXPECT_EQ(c.moe_every, 2);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  doc["mlp_only_layers"] = nullptr;
  EXPECT_EQ(read(doc).moe_every, 2);
  doc["mlp_only_layers"] = {0, 3};  // 1 sparse before the dense 3
  EXPECT_NE(error(doc).find("mlp_only_layers = [0,3]: layer 1 is sparse at decoder_sparse_step 2"),
            std::string::npos);
}

}  // namespace
