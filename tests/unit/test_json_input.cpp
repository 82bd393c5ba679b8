// The JSON of user files read through checked accessors (io/json_input.hpp): a wrong type in
// config.json or a safetensors header is one UsageError naming the file and the field, not the
// JSON library's type_error.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpitrain/model/hf_config.hpp"
#include "mpitrain/model/hf_model.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

class JsonInputTest : public ::testing::Test {  // a fresh temporary directory per test
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mpitrain-json-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    config_.n_layer = 1;
    config_.n_head = config_.n_kv_head = 2;
    config_.d_model = 8;
    config_.d_ff = 32;
    config_.max_seq_len = 8;
    config_.vocab_size = 16;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string hf() const { return (dir_ / "hf").string(); }

  void write_config(const std::string& text) const {
    fs::create_directories(hf());
    std::ofstream(fs::path(hf()) / "config.json") << text;
  }

  // An export of the tiny model, its safetensors header then changed by edit.
  void export_with_header(const std::function<void(json&)>& edit) const {
    const ParamLayout layout(config_);
    const std::vector<float> params(layout.total(), 0.5f);
    save_hf_model(hf(), config_, layout, params.data());
    const fs::path file = fs::path(hf()) / "model.safetensors";
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), sizeof n);
    json header = json::parse(bytes.substr(sizeof n, n));
    edit(header);
    const std::string text = header.dump();
    const uint64_t m = text.size();
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(&m), sizeof m);
    out << text << bytes.substr(sizeof n + n);
  }

  // The UsageError message of reading the HF directory: config, then weights ("" if none).
  std::string load_error() const {
    try {
      const ModelConfig c = read_hf_config(hf());
      load_hf_model(hf(), c, ParamLayout(c), [](const ParamTensor&, const float*) {});
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  std::string config_file() const { return (fs::path(hf()) / "config.json").string(); }
  std::string weights_file() const { return (fs::path(hf()) / "model.safetensors").string(); }

  fs::path dir_;
  ModelConfig config_;
};

TEST_F(JsonInputTest, ExportReadsBack) {
  export_with_header([](json&) {});
  EXPECT_EQ(load_error(), "");
}

TEST_F(JsonInputTest, ConfigFieldsOfTheWrongTypeAreNamed) {
  write_config(R"({"model_type": 5})");
  EXPECT_EQ(load_error(), config_file() + ": model_type must be a string, got a number");
  write_config(R"(["gpt2"])");
  EXPECT_EQ(load_error(), config_file() + ": the document must be an object, got an array");
  write_config(R"({"model_type": "gpt2", "n_layer": "2"})");
  EXPECT_EQ(load_error(), config_file() + ": n_layer must be an integer, got a string");
  write_config(R"({"model_type": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8,
                   "n_positions": 8, "vocab_size": 16, "activation_function": ["gelu_new"]})");
  EXPECT_EQ(load_error(), config_file() + ": activation_function must be a string, got an array");
  write_config(R"({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2,
                   "hidden_size": 8, "intermediate_size": 32, "max_position_embeddings": 8,
                   "vocab_size": 16, "rms_norm_eps": "1e-6"})");
  EXPECT_EQ(load_error(), config_file() + ": rms_norm_eps must be a number, got a string");
  write_config(R"({"model_type": "llama", "num_hidden_layers": 1, "num_attention_heads": 2,
                   "hidden_size": 8, "intermediate_size": 32, "max_position_embeddings": 8,
                   "vocab_size": 16, "tie_word_embeddings": "no"})");
  EXPECT_EQ(load_error(), config_file() + ": tie_word_embeddings must be a boolean, got a string");
}

TEST_F(JsonInputTest, SafetensorsHeaderFieldsOfTheWrongTypeAreNamed) {
  const std::string wte = "transformer.wte.weight";
  export_with_header([&](json& h) { h[wte]["dtype"] = 5; });
  EXPECT_EQ(load_error(), weights_file() + ": " + wte + ".dtype must be a string, got a number");
  fs::remove_all(hf());
  export_with_header([&](json& h) { h[wte]["shape"] = "16x8"; });
  EXPECT_EQ(load_error(),
            weights_file() + ": " + wte + ".shape must be an array of integers, got a string");
  fs::remove_all(hf());
  export_with_header([&](json& h) { h[wte]["data_offsets"][0] = "0"; });
  EXPECT_EQ(load_error(), weights_file() + ": " + wte +
                              ".data_offsets[0] must be an integer below 2^63, got a string");
  fs::remove_all(hf());
  export_with_header([&](json& h) { h[wte]["data_offsets"][1] = uint64_t{1} << 63; });
  EXPECT_EQ(load_error(), weights_file() + ": " + wte +
                              ".data_offsets[1] must be an integer below 2^63, got a number");
  fs::remove_all(hf());
  export_with_header([&](json& h) { h[wte] = 3; });
  EXPECT_EQ(load_error(), weights_file() + ": " + wte + " must be an object, got a number");
  fs::remove_all(hf());
  export_with_header([&](json& h) { h = json::array({1}); });
  EXPECT_EQ(load_error(), weights_file() +
                              ": the header must be an object {tensor: {dtype, shape, "
                              "data_offsets}}, got an array");
}

}  // namespace
