// The config.json table (model/hf_config.hpp): every key of the real checkpoints' configs
// (tests/support/hf_configs) is classified; an unknown key, and each value that would change the
// model silently, is refused naming the file, the key and the value; the export's config reads
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

using namespace mpitrain;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

const char* const kRealConfigs[] = {"gpt2", "Llama-3.2-1B", "Qwen2.5-0.5B", "Qwen3-0.6B",
                                    "Mistral-7B-v0.1"};

json real_config(const std::string& name) {
  std::ifstream in(fs::path(MPITRAIN_HF_CONFIGS) / (name + ".json"));
  EXPECT_TRUE(in) << name;
  return json::parse(in);
}

// The real config with the features the model lacks set to what it computes (untied, no RoPE
// scaling, head_dim hidden_size / num_attention_heads), so that one more key can be tried.
json without_missing_features(const std::string& name) {
  json doc = real_config(name);
  if (doc["model_type"] == "gpt2") return doc;
  doc["tie_word_embeddings"] = false;
  doc["rope_scaling"] = nullptr;
  doc["head_dim"] = doc["hidden_size"].get<int>() / doc["num_attention_heads"].get<int>();
  return doc;
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

  // The error of reading doc as config.json at seq_len ("" if it reads).
  std::string error(const json& doc, int seq_len = 1024) const {
    std::ofstream(file()) << doc.dump(2);
    try {
      read_hf_config(dir_.string(), seq_len);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  ModelConfig read(const json& doc, int seq_len = 1024) const {
    std::ofstream(file()) << doc.dump(2);
    return read_hf_config(dir_.string(), seq_len);
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

// Each real config reads, or is refused naming a feature the model lacks; with that key set to
// the value the model computes, the next one is named. The sequence of refused keys is the list
// of what each family still needs.
TEST_F(HfConfigTest, RealConfigsReadOrNameEachMissingFeature) {
  const std::map<std::string, std::vector<std::string>> refused = {
      {"gpt2", {}},
      {"Mistral-7B-v0.1", {}},
      {"Llama-3.2-1B", {"tie_word_embeddings", "rope_scaling"}},
      {"Qwen2.5-0.5B", {"tie_word_embeddings", "model_type"}},
      {"Qwen3-0.6B", {"head_dim", "tie_word_embeddings", "model_type"}}};
  for (const auto& [name, keys] : refused) {
    json doc = real_config(name);
    std::vector<std::string> named;
    for (std::string e = error(doc); !e.empty(); e = error(doc)) {
      const std::string prefix = file() + ": ";
      ASSERT_EQ(e.rfind(prefix, 0), 0u) << e;
      const std::string key = e.substr(prefix.size(), e.find(" = ") - prefix.size());
      ASSERT_TRUE(doc.contains(key)) << e;
      EXPECT_NE(e.find(" = " + doc[key].dump().substr(0, 40)), std::string::npos) << e;  // value
      named.push_back(key);
      if (key == "model_type") break;  // qwen2 / qwen3: the family itself is not implemented
      doc[key] = key == "tie_word_embeddings" ? json(false)
                 : key == "head_dim"
                     ? json(doc["hidden_size"].get<int>() / doc["num_attention_heads"].get<int>())
                     : json();
    }
    EXPECT_EQ(named, keys) << name;
  }
  const ModelConfig gpt2 = read(real_config("gpt2"));
  EXPECT_EQ(gpt2.arch, Arch::Gpt2);
  EXPECT_EQ(gpt2.n_layer, 12);
  EXPECT_EQ(gpt2.n_kv_head, 12);
  EXPECT_EQ(gpt2.d_ff, 4 * 768);
  EXPECT_EQ(gpt2.vocab_size, 50257);
  EXPECT_EQ(gpt2.norm_eps, 1e-5f);
  const ModelConfig mistral = read(real_config("Mistral-7B-v0.1"));
  EXPECT_EQ(mistral.arch, Arch::Llama);
  EXPECT_EQ(mistral.n_kv_head, 8);
  EXPECT_EQ(mistral.d_ff, 14336);
  EXPECT_EQ(mistral.max_seq_len, 32768);
  EXPECT_EQ(mistral.norm_eps, 1e-5f);
  EXPECT_EQ(mistral.rope_theta, 10000.0f);
}

TEST_F(HfConfigTest, QwenFamiliesNameTheirFeature) {
  EXPECT_EQ(error(without_missing_features("Qwen2.5-0.5B")), file() + ": model_type = \"qwen2\": qwen2's q/k/v biases are not "
                                   "implemented yet");
  EXPECT_EQ(error(without_missing_features("Qwen3-0.6B")), file() + ": model_type = \"qwen3\": qwen3's per-head q/k RMSNorm is "
                                   "not implemented yet");
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

// The silent changes (and the other values of features the model lacks): exit 2 (a
// UsageError) naming the file, the key and the value.
TEST_F(HfConfigTest, ValuesThatWouldChangeTheModelAreRefused) {
  struct Case {
    const char* config;
    const char* key;
    json value;
    int seq_len;
  };
  const Case cases[] = {
      {"Mistral-7B-v0.1", "sliding_window", 512, 1024},
      {"Mistral-7B-v0.1", "hidden_act", "gelu", 1024},
      {"Mistral-7B-v0.1", "rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}, 1024},
      {"Mistral-7B-v0.1", "tie_word_embeddings", true, 1024},
      {"Mistral-7B-v0.1", "head_dim", 64, 1024},
      {"gpt2", "tie_word_embeddings", false, 1024},
      {"gpt2", "scale_attn_by_inverse_layer_idx", true, 1024},
      {"gpt2", "scale_attn_weights", false, 1024},
      {"gpt2", "activation_function", "relu", 1024},
      {"gpt2", "add_cross_attention", true, 1024},
      {"Qwen2.5-0.5B", "use_sliding_window", true, 1024},
      {"Qwen2.5-0.5B", "use_mrope", true, 1024},
      {"Qwen3-0.6B", "layer_types", {"full_attention", "sliding_attention"}, 1024},
      {"Qwen3-0.6B", "attention_bias", true, 1024},
  };
  for (const Case& c : cases) {
    json doc = without_missing_features(c.config);
    doc[c.key] = c.value;
    const std::string e = error(doc, c.seq_len);
    EXPECT_EQ(e.rfind(file() + ": " + c.key + " = " + c.value.dump() + ": ", 0), 0u)
        << c.config << " " << c.key << ": " << e;
  }
  const json llama = without_missing_features("Llama-3.2-1B");
  for (const auto& [key, value] : std::map<std::string, json>{{"attention_bias", true},
                                                              {"mlp_bias", true},
                                                              {"hidden_act", "gelu"},
                                                              {"head_dim", 128},
                                                              {"pretraining_tp", 2}}) {
    json doc = llama;
    doc[key] = value;
    EXPECT_EQ(error(doc).rfind(file() + ": " + key + " = " + value.dump() + ": ", 0), 0u) << key;
  }
  EXPECT_EQ(error(llama), "");
  // A sliding window as long as the sequence masks nothing; absent, transformers' is 4096.
  json mistral = real_config("Mistral-7B-v0.1");
  EXPECT_EQ(error(mistral, 4096), "");
  mistral.erase("sliding_window");
  EXPECT_NE(error(mistral, 4097).find("sliding_window = 4096: "), std::string::npos);
  mistral["sliding_window"] = nullptr;
  EXPECT_EQ(error(mistral, 32768), "");
}

TEST_F(HfConfigTest, ExportReadsBackWithEpsilonsAsGiven) {
  ModelConfig llama;
  llama.arch = Arch::Llama;
  llama.n_layer = 2;
  llama.n_head = 4;
  llama.n_kv_head = 2;
  llama.d_model = 64;
  llama.d_ff = 128;
  llama.vocab_size = 300;
  llama.max_seq_len = 32;
  llama.norm_eps = 1e-5f;
  llama.rope_theta = 500000.0f;
  ModelConfig gpt2 = llama;
  gpt2.arch = Arch::Gpt2;
  gpt2.n_kv_head = 4;
  gpt2.norm_eps = 3e-6f;
  for (const ModelConfig& c : {llama, gpt2}) {
    const json doc = hf_config_json(c, 7);
    const std::string text = doc.dump(2);
    EXPECT_NE(text.find(c.arch == Arch::Llama ? "\"rms_norm_eps\": 1e-05"
                                              : "\"layer_norm_epsilon\": 3e-06"),
              std::string::npos)
        << text;
    EXPECT_EQ(doc["bos_token_id"], 7);
    const ModelConfig back = read(doc, 32);
    EXPECT_EQ(back.arch, c.arch);
    EXPECT_EQ(back.n_layer, c.n_layer);
    EXPECT_EQ(back.n_head, c.n_head);
    EXPECT_EQ(back.n_kv_head, c.n_kv_head);
    EXPECT_EQ(back.d_model, c.d_model);
    EXPECT_EQ(back.d_ff, c.d_ff);
    EXPECT_EQ(back.vocab_size, c.vocab_size);
    EXPECT_EQ(back.max_seq_len, c.max_seq_len);
    EXPECT_EQ(back.norm_eps, c.norm_eps);
    if (c.arch == Arch::Llama) {
      EXPECT_EQ(back.rope_theta, c.rope_theta);
    }
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

}  // namespace
