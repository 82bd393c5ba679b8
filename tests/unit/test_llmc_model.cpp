// llm.c model files: bf16 rounding, export/import round trips, the stacked-tensor mapping against a
// file written by hand, and the errors for bad files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mpitrain/model/llmc_model.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/tensor/bf16.hpp"

namespace mpitrain {
namespace {

namespace fs = std::filesystem;

static_assert(float_to_bf16(1.0f) == 0x3F80 && bf16_to_float(0x3F80) == 1.0f);

constexpr int L = 2, C = 8, NH = 2, V = 10, Vp = 128, maxT = 4;

ModelConfig tiny_config() {
  ModelConfig c;
  c.arch = Arch::Gpt2;
  c.n_layer = L;
  c.n_head = c.n_kv_head = NH;
  c.d_model = C;
  c.d_ff = 4 * C;
  c.vocab_size = V;
  c.max_seq_len = maxT;
  c.norm_eps = 1e-5f;
  return c;
}

uint16_t bf16_of_bits(uint32_t bits) { return float_to_bf16(std::bit_cast<float>(bits)); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

TEST(LlmcBf16, RoundsToNearestTiesToEven) {
  EXPECT_EQ(bf16_of_bits(0x3F808000), 0x3F80);  // tie, even neighbour below
  EXPECT_EQ(bf16_of_bits(0x3F818000), 0x3F82);  // tie, even neighbour above
  EXPECT_EQ(bf16_of_bits(0xBF808000), 0xBF80);  // negative tie
  EXPECT_EQ(bf16_of_bits(0xBF818000), 0xBF82);
  EXPECT_EQ(bf16_of_bits(0x3F808001), 0x3F81);  // just above half
  EXPECT_EQ(bf16_of_bits(0x3F807FFF), 0x3F80);  // just below half
  EXPECT_EQ(bf16_of_bits(0x3F80FFFF), 0x3F81);
  EXPECT_EQ(bf16_of_bits(0x00000000), 0x0000);
  EXPECT_EQ(bf16_of_bits(0x80000000), 0x8000);  // -0 keeps its sign
  EXPECT_EQ(bf16_of_bits(0x00018000), 0x0002);  // subnormal tie
}

TEST(LlmcBf16, InfinityAndNanSurvive) {
  EXPECT_EQ(bf16_of_bits(0x7F800000), 0x7F80);
  EXPECT_EQ(bf16_of_bits(0xFF800000), 0xFF80);
  EXPECT_EQ(bf16_of_bits(0x7F7FFFFF), 0x7F80);  // FLT_MAX rounds past the largest bf16
  for (uint32_t nan : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0x7FBFFFFFu, 0xFF80FFFFu}) {
    const uint16_t b = bf16_of_bits(nan);
    EXPECT_EQ(b & 0x7F80, 0x7F80) << std::hex << nan;
    EXPECT_NE(b & 0x007F, 0) << std::hex << nan;  // not turned into Inf
    EXPECT_EQ(b & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
    EXPECT_TRUE(std::isnan(bf16_to_float(b)));
  }
}

TEST(LlmcBf16, WideningIsExactForEveryPattern) {
  for (uint32_t b = 0; b <= 0xFFFF; ++b) {
    const float f = bf16_to_float(static_cast<uint16_t>(b));
    ASSERT_EQ(bits_of(f), b << 16);
    if (!std::isnan(f)) {
      ASSERT_EQ(float_to_bf16(f), b);
    }
  }
}

// A fresh directory per test.
class LlmcModel : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("mpitrain_llmc_" + std::to_string(::getpid()) + "_" + info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  ModelConfig config_ = tiny_config();
  ParamLayout layout_{config_};
  fs::path dir_;
};

// Random parameters, including wte's padding rows (kept as stored).
std::vector<float> random_params(const ParamLayout& layout) {
  std::mt19937 rng(1234);
  std::normal_distribution<float> dist(0.0f, 0.5f);
  std::vector<float> p(layout.total());
  for (float& x : p) x = dist(rng);
  return p;
}

void expect_usage_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no UsageError thrown";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    for (const auto& part : parts)
      EXPECT_NE(what.find(part), std::string::npos) << "'" << what << "' lacks '" << part << "'";
  }
}

void expect_same_config(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.arch, b.arch);
  EXPECT_EQ(a.n_layer, b.n_layer);
  EXPECT_EQ(a.n_head, b.n_head);
  EXPECT_EQ(a.n_kv_head, b.n_kv_head);
  EXPECT_EQ(a.d_model, b.d_model);
  EXPECT_EQ(a.d_ff, b.d_ff);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.max_seq_len, b.max_seq_len);
  EXPECT_EQ(a.norm_eps, b.norm_eps);
}

// Overwrites header int i of a file.
void patch_header(const std::string& file, int i, int32_t value) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(4 * i);
  f.write(reinterpret_cast<const char*>(&value), sizeof value);
  ASSERT_TRUE(f.good());
}

TEST_F(LlmcModel, Fp32RoundTripIsBitwise) {
  const std::vector<float> params = random_params(layout_);
  const std::string file = path("model.bin");
  save_llmc_model(file, config_, layout_, params.data(), LlmcDtype::Fp32);
  EXPECT_FALSE(fs::exists(file + ".tmp"));
  EXPECT_EQ(fs::file_size(file), 1024 + 4 * layout_.total());

  const ModelConfig read = read_llmc_config(file);
  expect_same_config(read, config_);
  std::vector<float> loaded(layout_.total(), -1.0f);
  load_llmc_model(file, read, ParamLayout(read), loaded.data());
  for (size_t i = 0; i < params.size(); ++i) ASSERT_EQ(bits_of(loaded[i]), bits_of(params[i])) << i;
}

TEST_F(LlmcModel, Bf16RoundTripRoundsToNearestEven) {
  std::vector<float> params = random_params(layout_);
  const std::array<uint32_t, 9> special = {0x3F808000, 0x3F818000, 0x7FC00000, 0x7F800001,
                                           0x7F800000, 0xFF800000, 0x80000000, 0x7F7FFFFF,
                                           0x3F808001};
  const size_t last = layout_.offset(Slot::LnfB);  // the file's last tensor as well as its first
  for (size_t i = 0; i < special.size(); ++i) {
    params[i] = std::bit_cast<float>(special[i]);
    params[last + i - 1] = std::bit_cast<float>(special[i]);
  }
  const std::string file = path("model_bf16.bin");
  save_llmc_model(file, config_, layout_, params.data(), LlmcDtype::Bf16);
  EXPECT_EQ(fs::file_size(file), 1024 + 2 * layout_.total());
  expect_same_config(read_llmc_config(file), config_);

  std::vector<float> loaded(layout_.total());
  load_llmc_model(file, config_, layout_, loaded.data());
  for (size_t i = 0; i < params.size(); ++i) {
    if (std::isnan(params[i])) {
      ASSERT_TRUE(std::isnan(loaded[i])) << i;
      continue;
    }
    ASSERT_EQ(bits_of(loaded[i]), uint32_t{float_to_bf16(params[i])} << 16) << i;
  }
  EXPECT_EQ(bits_of(loaded[0]), 0x3F800000u);
  EXPECT_EQ(bits_of(loaded[1]), 0x3F820000u);
  EXPECT_EQ(bits_of(loaded[4]), 0x7F800000u);
  EXPECT_EQ(bits_of(loaded[5]), 0xFF800000u);
  EXPECT_EQ(bits_of(loaded[6]), 0x80000000u);
  EXPECT_EQ(bits_of(loaded[7]), 0x7F800000u);
  EXPECT_EQ(bits_of(loaded[8]), 0x3F810000u);
  EXPECT_EQ(bits_of(loaded[last + 4]), 0xFF800000u);
}

// llm.c's tensors in file order: our name (per layer "h.<l>.<name>"), stacked over L or not, and
// elements per layer.
struct FileTensor {
  const char* name;
  bool stacked;
  size_t per_layer;
};
const std::array<FileTensor, 16> kFileTensors = {{
    {"wte", false, Vp * C},
    {"wpe", false, maxT * C},
    {"ln1.weight", true, C},
    {"ln1.bias", true, C},
    {"attn.qkv.weight", true, 3 * C * C},
    {"attn.qkv.bias", true, 3 * C},
    {"attn.proj.weight", true, C * C},
    {"attn.proj.bias", true, C},
    {"ln2.weight", true, C},
    {"ln2.bias", true, C},
    {"mlp.fc.weight", true, 4 * C * C},
    {"mlp.fc.bias", true, 4 * C},
    {"mlp.proj.weight", true, C * 4 * C},
    {"mlp.proj.bias", true, C},
    {"lnf.weight", false, C},
    {"lnf.bias", false, C},
}};

// The value at index j of llm.c tensor t (g counts elements over the whole file): fp32 files hold
// t * 4096 + j (exact), bf16 files the distinct finite bit patterns 0x3F80 + g.
float file_value(LlmcDtype dtype, size_t t, size_t j, size_t g) {
  return dtype == LlmcDtype::Fp32 ? static_cast<float>(t * 4096 + j)
                                  : bf16_to_float(static_cast<uint16_t>(0x3F80 + g));
}

// Writes a model file the way llm.c lays it out, independently of the code under test.
void write_by_hand(const std::string& file, LlmcDtype dtype) {
  std::ofstream out(file, std::ios::binary);
  std::array<int32_t, 256> header{};
  header[0] = 20240326;
  header[1] = static_cast<int32_t>(dtype);
  header[2] = maxT;
  header[3] = V;
  header[4] = L;
  header[5] = NH;
  header[6] = C;
  header[7] = Vp;
  out.write(reinterpret_cast<const char*>(header.data()), sizeof header);
  size_t g = 0;
  for (size_t t = 0; t < kFileTensors.size(); ++t) {
    const size_t n = kFileTensors[t].per_layer * (kFileTensors[t].stacked ? L : 1);
    for (size_t j = 0; j < n; ++j, ++g) {
      const float v = file_value(dtype, t, j, g);
      if (dtype == LlmcDtype::Fp32) {
        out.write(reinterpret_cast<const char*>(&v), sizeof v);
      } else {
        const uint16_t b = static_cast<uint16_t>(bits_of(v) >> 16);
        out.write(reinterpret_cast<const char*>(&b), sizeof b);
      }
    }
  }
  ASSERT_TRUE(out.good());
}

void check_hand_written_mapping(const std::string& file, LlmcDtype dtype) {
  write_by_hand(file, dtype);
  const ModelConfig config = read_llmc_config(file);
  expect_same_config(config, tiny_config());
  const ParamLayout layout(config);
  std::vector<float> params(layout.total(), -1.0f);
  load_llmc_model(file, config, layout, params.data());

  size_t g0 = 0;  // the tensor's first element in the file
  size_t covered = 0;
  for (size_t t = 0; t < kFileTensors.size(); ++t) {
    const FileTensor& ft = kFileTensors[t];
    for (int l = 0; l < (ft.stacked ? L : 1); ++l) {
      const std::string name = ft.stacked ? "h." + std::to_string(l) + "." + ft.name : ft.name;
      const ParamTensor& ours = layout.find(name);
      ASSERT_EQ(ours.numel, ft.per_layer) << name;
      for (size_t k = 0; k < ft.per_layer; ++k) {
        const size_t j = l * ft.per_layer + k;  // index within llm.c's stacked tensor
        ASSERT_EQ(bits_of(params[ours.offset + k]), bits_of(file_value(dtype, t, j, g0 + j)))
            << name << "[" << k << "]";
      }
      covered += ft.per_layer;
    }
    g0 += ft.per_layer * (ft.stacked ? L : 1);
  }
  EXPECT_EQ(covered, layout.total());
}

TEST_F(LlmcModel, HandWrittenFp32FileMapsStackedTensorsToLayers) {
  const std::string file = path("hand.bin");
  check_hand_written_mapping(file, LlmcDtype::Fp32);

  // Spelled out: our h.1.attn.qkv.weight[o][i] is llm.c's qkvw[1][o][i] (tensor #4, (L, 3C, C)),
  // and h.1.mlp.proj.weight[o][i] is fcprojw[1][o][i] (tensor #12, (L, C, 4C)).
  std::vector<float> params(layout_.total());
  load_llmc_model(file, config_, layout_, params.data());
  const size_t qkv = layout_.find("h.1.attn.qkv.weight").offset;
  const int o = 17, i = 5;
  EXPECT_EQ(params[qkv + o * C + i], static_cast<float>(4 * 4096 + (1 * 3 * C + o) * C + i));
  const size_t fcproj = layout_.find("h.1.mlp.proj.weight").offset;
  EXPECT_EQ(params[fcproj + 3 * 4 * C + 30],
            static_cast<float>(12 * 4096 + (1 * C + 3) * 4 * C + 30));
  EXPECT_EQ(params[layout_.offset(Slot::Wte) + V * C], static_cast<float>(V * C));  // padding row
}

TEST_F(LlmcModel, HandWrittenBf16FileWidensExactly) {
  check_hand_written_mapping(path("hand_bf16.bin"), LlmcDtype::Bf16);
}

TEST_F(LlmcModel, BadFilesAreUsageErrorsNamingThePath) {
  const std::vector<float> params = random_params(layout_);
  std::vector<float> out(layout_.total());
  const std::string missing = path("missing.bin");
  expect_usage_error([&] { read_llmc_config(missing); }, {missing});
  expect_usage_error([&] { load_llmc_model(missing, config_, layout_, out.data()); }, {missing});

  const std::string file = path("model.bin");
  auto fresh = [&] { save_llmc_model(file, config_, layout_, params.data(), LlmcDtype::Fp32); };

  fresh();
  fs::resize_file(file, fs::file_size(file) - 4);
  expect_usage_error([&] { read_llmc_config(file); }, {file, "size"});
  expect_usage_error([&] { load_llmc_model(file, config_, layout_, out.data()); }, {file, "size"});
  fs::resize_file(file, 100);
  expect_usage_error([&] { read_llmc_config(file); }, {file, "header"});

  fresh();
  patch_header(file, 0, 20240520);  // a token shard's magic
  expect_usage_error([&] { read_llmc_config(file); }, {file, "magic", "20240520"});

  fresh();
  patch_header(file, 1, 4);
  expect_usage_error([&] { read_llmc_config(file); }, {file, "version 4"});

  fresh();
  patch_header(file, 7, 256);
  expect_usage_error([&] { read_llmc_config(file); }, {file, "Vp = 256"});

  fresh();
  patch_header(file, 5, 3);  // 3 heads do not divide C = 8
  expect_usage_error([&] { read_llmc_config(file); }, {file, "n-head"});

  fresh();
  patch_header(file, 4, -1);
  expect_usage_error([&] { read_llmc_config(file); }, {file, "L = -1"});

  fresh();
  patch_header(file, 4, 3);  // a valid header for a bigger model than the file holds
  expect_usage_error([&] { read_llmc_config(file); }, {file, "size"});
}

TEST_F(LlmcModel, ConfigMismatchNamesTheField) {
  const std::vector<float> params = random_params(layout_);
  const std::string file = path("model.bin");
  save_llmc_model(file, config_, layout_, params.data(), LlmcDtype::Bf16);

  ModelConfig longer = config_;
  longer.max_seq_len = 8;
  std::vector<float> out(ParamLayout(longer).total());
  expect_usage_error([&] { load_llmc_model(file, longer, ParamLayout(longer), out.data()); },
                     {file, "seq-len", "4", "8"});

  ModelConfig heads = config_;
  heads.n_head = heads.n_kv_head = 4;
  expect_usage_error([&] { load_llmc_model(file, heads, ParamLayout(heads), out.data()); },
                     {file, "n-head"});

  ModelConfig eps = config_;
  eps.norm_eps = 1e-6f;
  expect_usage_error([&] { load_llmc_model(file, eps, ParamLayout(eps), out.data()); },
                     {file, "norm-eps"});
}

TEST_F(LlmcModel, SaveRejectsWhatLlmcCannotHoldAndLeavesNoFile) {
  ModelConfig llama = config_;
  llama.set_arch(Arch::Llama);
  const ParamLayout llama_layout(llama);
  const std::vector<float> params(llama_layout.total(), 0.5f);
  const std::string file = path("llama.bin");
  expect_usage_error(
      [&] { save_llmc_model(file, llama, llama_layout, params.data(), LlmcDtype::Fp32); },
      {file, "gpt2"});

  ModelConfig wide = config_;
  wide.d_ff = 3 * C;
  const ParamLayout wide_layout(wide);
  expect_usage_error(
      [&] { save_llmc_model(file, wide, wide_layout, params.data(), LlmcDtype::Bf16); },
      {file, "d-ff"});

  const std::string nowhere = path("no/such/dir/model.bin");
  expect_usage_error(
      [&] { save_llmc_model(nowhere, config_, layout_, params.data(), LlmcDtype::Fp32); },
      {nowhere});
  EXPECT_TRUE(fs::is_empty(dir_));
}

TEST_F(LlmcModel, SaveReplacesAnExistingFileWhole) {
  const std::string file = path("model.bin");
  std::vector<float> params = random_params(layout_);
  save_llmc_model(file, config_, layout_, params.data(), LlmcDtype::Bf16);
  for (float& x : params) x *= 2.0f;
  save_llmc_model(file, config_, layout_, params.data(), LlmcDtype::Fp32);
  EXPECT_FALSE(fs::exists(file + ".tmp"));
  std::vector<float> loaded(layout_.total());
  load_llmc_model(file, config_, layout_, loaded.data());
  EXPECT_EQ(loaded, params);
}

}  // namespace
}  // namespace mpitrain
