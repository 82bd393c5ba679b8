// Hugging Face checkpoints as users have them (model/hf_model.hpp, model/safetensors.hpp): the
// export sharded with an index above its size threshold, read back whole and as a tp/pp shard;
// the index's errors refused; the original gpt2 upload's bare names; F16 and BF16 files; Mixtral's
// and Qwen3-MoE's experts.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpitrain/model/hf_config.hpp"
#include "mpitrain/model/hf_model.hpp"
#include "mpitrain/model/safetensors.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/tensor/bf16.hpp"

using namespace mpitrain;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string read_bytes(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Rewrites a safetensors file tensor by tensor: edit(name, entry, data) may rename the tensor
// (returns its new name) and change its entry's dtype with its data; extra tensors are appended.
void rewrite(const fs::path& file,
             const std::function<std::string(const std::string&, json&, std::string&)>& edit,
             const std::vector<std::pair<std::string, std::vector<float>>>& extra = {}) {
  const std::string bytes = read_bytes(file);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), sizeof n);
  const json header = json::parse(bytes.substr(sizeof n, n));
  json out = json::object();
  std::string data;
  auto add = [&](const std::string& name, json entry, const std::string& raw) {
    entry["data_offsets"] = {data.size(), data.size() + raw.size()};
    out[name] = entry;
    data += raw;
  };
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") continue;
    const auto off = entry["data_offsets"].get<std::vector<uint64_t>>();
    std::string raw = bytes.substr(sizeof n + n + off[0], off[1] - off[0]);
    json e = entry;
    const std::string renamed = edit(name, e, raw);
    add(renamed, e, raw);
  }
  for (const auto& [name, values] : extra)
    add(name, {{"dtype", "F32"}, {"shape", {values.size()}}},
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
  const std::string text = out.dump();
  const uint64_t m = text.size();
  std::ofstream o(file, std::ios::binary | std::ios::trunc);
  o.write(reinterpret_cast<const char*>(&m), sizeof m);
  o << text << data;
}

// F32 data as F16 or BF16 (the test's values are exact in both).
std::string narrowed(const std::string& raw, const std::string& dtype) {
  std::string out(raw.size() / 2, '\0');
  for (size_t i = 0; i < raw.size() / 4; ++i) {
    float x;
    std::memcpy(&x, raw.data() + 4 * i, 4);
    const uint16_t h = dtype == "BF16" ? float_to_bf16(x) : std::bit_cast<uint16_t>(_Float16(x));
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}

class HfCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mpitrain-hfckpt-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    config_.n_layer = 2;
    config_.n_head = 4;
    config_.n_kv_head = 2;
    config_.d_model = 16;
    config_.d_ff = 32;
    config_.max_seq_len = 8;
    config_.vocab_size = 200;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string hf() const { return (dir_ / "hf").string(); }

  // The model's parameters: multiples of 1/8 (exact in F16 and BF16), zero in the padding rows.
  std::vector<float> params(const ParamLayout& layout) const {
    std::vector<float> p(layout.total(), 0.0f);
    for (const ParamTensor& t : layout.tensors()) {
      const int64_t cols = t.global_shape.back();
      const bool vocab = t.name == "wte" || t.name == "lm_head.weight";
      for (size_t i = 0; i < t.numel; ++i)
        if (!vocab || static_cast<int64_t>(i) / cols < config_.vocab_size)
          p[t.offset + i] = static_cast<float>(static_cast<int>((i * 7 + t.offset) % 23) - 11) / 8;
    }
    return p;
  }

  void save(uint64_t max_file_bytes = kHfMaxFileBytes) {
    const ParamLayout layout(config_);
    save_hf_model(hf(), config_, layout, params(layout).data(), nullptr, max_file_bytes);
  }

  // The model read back into layout (whole or a shard; wanted: a part of each tensor);
  // bytes_read: what load_hf_model read from the files.
  std::vector<float> load(const ParamLayout& layout, uint64_t* bytes_read = nullptr,
                          const std::function<std::pair<size_t, size_t>(const ParamTensor&)>&
                              wanted = {}) const {
    const ModelConfig c = read_hf_config(hf());
    check_hf_weights(hf(), c);
    std::vector<float> out(layout.total(), -1.0f);
    const uint64_t bytes = load_hf_model(
        hf(), c, layout,
        [&](const ParamTensor& p, const float* v) {
          std::copy(v, v + p.numel, out.begin() + static_cast<std::ptrdiff_t>(p.offset));
        },
        wanted);
    if (bytes_read) *bytes_read = bytes;
    return out;
  }

  // Elements of layout's tensors the checkpoint stores (the vocabulary's padding rows are not).
  int64_t stored_elements(const ParamLayout& layout) const {
    int64_t n = 0;
    for (const ParamTensor& p : layout.tensors()) {
      const bool vocab = p.name == "wte" || p.name == "lm_head.weight";
      if (!vocab) {
        n += static_cast<int64_t>(p.numel);
        continue;
      }
      for_each_run(p, [&](uint64_t g, uint64_t, uint64_t k) {
        for (uint64_t e = g; e < g + k; ++e)
          n += static_cast<int64_t>(e) / p.global_shape.back() < config_.vocab_size;
      });
    }
    return n;
  }

  std::string load_error() const {
    try {
      load(ParamLayout(config_));
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }

  // The model of variant 0 to kVariants - 1: gpt2, llama, and the features that add or permute
  // tensors: qwen3 (q/k norms, q/k/v/o biases, a tied head, heads of 6), llama with q/k/v/o and
  // MLP biases, mixtral (4 experts in every layer), qwen3_moe (qwen3's features; 4 experts of
  // width 8 in layer 1, layer 0 dense) and qwen2_moe (q, k, v biases; 4 experts of width 8 and a
  // gated shared expert of 16 in every layer).
  static constexpr int kVariants = 7;
  void set_variant(int variant) {
    const Arch arch = variant == 0 ? Arch::Gpt2 : Arch::Llama;
    config_.set_arch(arch);
    config_.n_kv_head = arch == Arch::Gpt2 ? config_.n_head : 2;
    const bool qwen3 = variant == 2 || variant == 5;
    config_.qk_norm = qwen3;
    config_.head_dim = qwen3 ? 6 : 0;
    if (qwen3 || variant == 3) config_.qkv_bias = config_.proj_bias = config_.tie_embeddings = true;
    config_.qkv_bias = config_.qkv_bias || variant == 6;
    config_.mlp_bias = arch == Arch::Gpt2 || variant == 3;
    config_.n_experts = variant >= 4 ? 4 : 0;
    config_.moe_ff = variant >= 5 ? 8 : 0;
    config_.moe_every = variant == 5 ? 2 : 1;
    config_.n_shared_experts = variant == 6 ? 2 : 0;
    config_.moe_shared_gate = variant == 6;
  }

  fs::path dir_;
  ModelConfig config_;
};

TEST_F(HfCheckpointTest, ShardedExportReadsBackWholeAndAsShards) {
  for (int variant = 0; variant < kVariants; ++variant) {
    set_variant(variant);
    fs::remove_all(hf());
    save(4096);  // bytes per file: the model's ~40 KB in several
    EXPECT_FALSE(fs::exists(fs::path(hf()) / kSafetensorsFile));
    const json index = json::parse(read_bytes(fs::path(hf()) / kSafetensorsIndex));
    std::set<std::string> files;
    for (const auto& [tensor, file] : index["weight_map"].items()) files.insert(file);
    EXPECT_GT(files.size(), 3u);
    char first[64];
    std::snprintf(first, sizeof first, "model-00001-of-%05zu.safetensors", files.size());
    EXPECT_TRUE(files.count(first)) << index.dump();
    for (const std::string& f : files)  // a file holds one tensor larger than the limit, or fits
      EXPECT_TRUE(fs::file_size(fs::path(hf()) / f) < 4096 + 1024 ||
                  read_bytes(fs::path(hf()) / f).find("\"dtype\"") ==
                      read_bytes(fs::path(hf()) / f).rfind("\"dtype\""))
          << f;
    const ParamLayout whole(config_);
    EXPECT_EQ(load(whole), params(whole));
    // tp 2 x pp 2, each rank's shard: what take_shard cuts from the whole model.
    const std::vector<float> full = params(whole);
    for (int tp_rank = 0; tp_rank < 2; ++tp_rank)
      for (int stage = 0; stage < 2; ++stage) {
        const ModelShard shard{2, tp_rank, stage, stage + 1, stage == 0, stage == 1};
        const ParamLayout part(config_, shard);
        std::vector<float> expected(part.total());
        for (const ParamTensor& p : part.tensors())
          take_shard(p, full.data() + whole.tensors()[p.global_index].offset,
                     expected.data() + p.offset);
        EXPECT_EQ(load(part), expected) << "variant " << variant << " tp " << tp_rank << " pp " << stage;
      }
    // Under the limit: one model.safetensors, no index.
    fs::remove_all(hf());
    save();
    EXPECT_TRUE(fs::exists(fs::path(hf()) / kSafetensorsFile));
    EXPECT_FALSE(fs::exists(fs::path(hf()) / kSafetensorsIndex));
  }
}

// What transformers has no MoE class for is refused before any work, naming the option.
TEST_F(HfCheckpointTest, ExpertsWithoutAnHfClassAreRefused) {
  set_variant(4);  // mixtral
  const auto error = [&](const ModelConfig& c) -> std::string {
    try {
      require_hf_expressible(hf(), c);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error(config_), "");
  ModelConfig shared = config_, sparse = config_, first_dense = config_, biased = config_;
  shared.n_shared_experts = 1;
  sparse.moe_every = 2;
  first_dense.moe_first_dense = 1;
  biased.qkv_bias = true;
  EXPECT_NE(error(shared).find("n-shared-experts without --moe-shared-expert-gate cannot be "
                               "exported"),
            std::string::npos);
  ModelConfig gated = shared;  // qwen2_moe: gated, with or without q, k, v biases; no q/k norms
  gated.moe_shared_gate = true;
  EXPECT_EQ(error(gated), "");
  gated.qkv_bias = true;
  EXPECT_EQ(error(gated), "");
  gated.qk_norm = true;
  EXPECT_NE(
      error(gated).find("a qwen2_moe model (a gated shared expert) has no per-head q/k norms"),
      std::string::npos)
      << error(gated);
  for (const ModelConfig& c : {sparse, first_dense, biased})
    EXPECT_NE(error(c).find("moe-every > 1, moe-first-dense or biases cannot be exported"),
              std::string::npos)
        << error(c);
  ModelConfig sigmoid = config_, expert_bias = config_, scaled = config_, grouped = config_;
  sigmoid.moe_sigmoid = true;
  expert_bias.moe_sigmoid = expert_bias.moe_expert_bias = true;
  scaled.moe_route_scale = 2;
  grouped.moe_groups = 2;
  grouped.moe_group_topk = 1;
  for (ModelConfig c : {sigmoid, expert_bias, scaled, grouped}) {
    EXPECT_NE(error(c).find("--moe-router-score sigmoid, --moe-expert-bias, --moe-route-scale and "
                            "--moe-router-groups cannot be exported"),
              std::string::npos)
        << error(c);
    c.qk_norm = true;  // nor as qwen3_moe
    EXPECT_NE(error(c).find("cannot be exported"), std::string::npos) << error(c);
  }
  sparse.qk_norm = true;  // qwen3_moe: dense layers between are its decoder_sparse_step
  EXPECT_EQ(error(sparse), "");
  ModelConfig qkv_only = sparse, all_biases = sparse;  // qwen3_moe: all of q, k, v, o or none
  qkv_only.qkv_bias = true;
  all_biases.qkv_bias = all_biases.proj_bias = true;
  EXPECT_NE(error(qkv_only).find("a qwen3_moe model (per-head q/k norms) has biases on all of q, "
                                 "k, v and o or on none"),
            std::string::npos)
      << error(qkv_only);
  EXPECT_EQ(error(all_biases), "");
}

TEST_F(HfCheckpointTest, IndexErrorsAreRefused) {
  config_.set_arch(Arch::Llama);
  const fs::path index = fs::path(hf()) / kSafetensorsIndex;
  const auto with_index = [&](const std::function<void(json&)>& edit) {
    fs::remove_all(hf());
    save(4096);
    json doc = json::parse(read_bytes(index));
    edit(doc);
    std::ofstream(index) << doc.dump();
    return load_error();
  };
  const std::string first = "model-00001-of-";
  EXPECT_EQ(with_index([](json&) {}), "");
  EXPECT_NE(with_index([](json& d) { d["weight_map"]["lm_head.weight"] = "../elsewhere.safetensors"; })
                .find("weight_map.lm_head.weight = ../elsewhere.safetensors is not a file of the "
                      "directory itself"),
            std::string::npos);
  EXPECT_NE(with_index([](json& d) { d["weight_map"]["lm_head.weight"] = "missing.safetensors"; })
                .find("missing.safetensors: cannot open"),
            std::string::npos);
  // A tensor its file lacks; one a file holds but the index maps to another (there twice).
  std::string e = with_index([](json& d) { d["weight_map"]["model.norm.weight"] =
                                               d["weight_map"]["model.embed_tokens.weight"]; });
  EXPECT_TRUE(e.find("holds model.norm.weight, which") != std::string::npos ||
              e.find("maps model.norm.weight to") != std::string::npos)
      << e;
  std::string dropped;  // a tensor that shares its file with another
  e = with_index([&](json& d) {
    std::map<std::string, int> per_file;
    for (const auto& [tensor, file] : d["weight_map"].items()) ++per_file[file];
    for (const auto& [tensor, file] : d["weight_map"].items())
      if (per_file[file] > 1) dropped = tensor;
    d["weight_map"].erase(dropped);
  });
  EXPECT_NE(e.find("holds " + dropped + ", which " + index.string() + " does not map"),
            std::string::npos)
      << e;
  // The same tensor in two files.
  fs::remove_all(hf());
  save(4096);
  const json doc = json::parse(read_bytes(index));
  const std::string norm_file = doc["weight_map"]["model.norm.weight"];
  const std::string other = doc["weight_map"]["model.embed_tokens.weight"];
  rewrite(fs::path(hf()) / other, [](const std::string& n, json&, std::string&) { return n; },
          {{"model.norm.weight", std::vector<float>(16, 1.0f)}});
  EXPECT_NE(load_error().find("holds model.norm.weight, which " + index.string() + " maps to " +
                              (fs::path(hf()) / norm_file).string() + ": a tensor in two files"),
            std::string::npos)
      << load_error();
  // Both model.safetensors and an index.
  std::ofstream(fs::path(hf()) / kSafetensorsFile) << "x";
  EXPECT_NE(load_error().find("holds both model.safetensors and model.safetensors.index.json"),
            std::string::npos);
  // A header naming a tensor twice (the JSON library would keep the last).
  fs::remove_all(hf());
  save();
  const std::string bytes = read_bytes(fs::path(hf()) / kSafetensorsFile);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), sizeof n);
  const std::string once = bytes.substr(sizeof n, n);  // {..., "model.norm.weight": {...}, ...}
  const size_t at = once.find("\"model.norm.weight\"");
  const std::string entry(once, at, once.find('}', at) + 1 - at);
  const std::string header = once.substr(0, once.rfind('}')) + ',' + entry + '}';
  const uint64_t m = header.size();
  std::ofstream out(fs::path(hf()) / kSafetensorsFile, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(&m), sizeof m);
  out << header << bytes.substr(sizeof n + n);
  out.close();
  EXPECT_NE(load_error().find("(its header): names model.norm.weight twice"), std::string::npos)
      << load_error();
}

TEST_F(HfCheckpointTest, HubStyleGpt2NamesAndBuffersAreRead) {
  config_.set_arch(Arch::Gpt2);
  config_.n_kv_head = config_.n_head;
  save();
  const fs::path file = fs::path(hf()) / kSafetensorsFile;
  const std::vector<float> mask(64, 1.0f);  // the original upload's attn.bias buffers
  rewrite(file, [](const std::string& name, json&, std::string&) { return name.substr(12); },
          {{"h.0.attn.bias", mask}, {"h.1.attn.bias", mask}});
  const ParamLayout whole(config_);
  EXPECT_EQ(load(whole), params(whole));
  // A tensor the model has no place for (an untied head in a tied config) is refused.
  rewrite(file, [](const std::string& n, json&, std::string&) { return n; },
          {{"lm_head.weight", std::vector<float>(16, 0.0f)}});
  EXPECT_EQ(load_error(), file.string() + " holds lm_head.weight, which the model config.json "
                                          "describes has no place for: refused rather than dropped");
}

TEST_F(HfCheckpointTest, F16AndBf16AreWidened) {
  config_.set_arch(Arch::Llama);
  for (const char* dtype : {"F16", "BF16"}) {
    fs::remove_all(hf());
    save();
    rewrite(fs::path(hf()) / kSafetensorsFile, [&](const std::string& n, json& e, std::string& raw) {
      e["dtype"] = dtype;
      raw = narrowed(raw, dtype);
      return n;
    });
    const ParamLayout whole(config_);
    EXPECT_EQ(load(whole), params(whole)) << dtype;
  }
  rewrite(fs::path(hf()) / kSafetensorsFile, [&](const std::string& n, json& e, std::string&) {
    if (n == "model.norm.weight") {
      e["dtype"] = "I16";
    }
    return n;
  });
  EXPECT_NE(load_error().find("model.norm.weight is I16; F32, F16 or BF16 only"), std::string::npos)
      << load_error();
}

TEST_F(HfCheckpointTest, ARankReadsOnlyItsShare) {
  // A tp rank reads the rows (column-parallel: q/k/v heads, gate/up, the vocabulary) or the
  // columns (row-parallel: o_proj, down_proj; gpt2's Conv1D transposes which) of its slice and
  // nothing else: the bytes read are its shard's stored elements, 4 each in F32, 2 in F16
  // (the qwen3-like variant, 2).
  for (int variant = 0; variant < kVariants; ++variant) {
    set_variant(variant);
    fs::remove_all(hf());
    save(4096);
    const std::string dtype = variant == 2 ? "F16" : "F32";
    if (variant == 2)
      for (const auto& f : fs::directory_iterator(hf()))
        if (f.path().extension() == ".safetensors")
          rewrite(f.path(), [&](const std::string& n, json& e, std::string& raw) {
            e["dtype"] = dtype;
            raw = narrowed(raw, dtype);
            return n;
          });
    const int64_t width = variant == 2 ? 2 : 4;
    const ParamLayout whole(config_);
    const std::vector<float> full = params(whole);
    uint64_t bytes = 0;
    load(whole, &bytes);
    EXPECT_EQ(static_cast<int64_t>(bytes), width * stored_elements(whole));
    for (int stages = 1; stages <= 2; ++stages)
      for (int tp_rank = 0; tp_rank < 2; ++tp_rank)
        for (int stage = 0; stage < stages; ++stage) {
          const ModelShard shard{2, tp_rank, stage, stages == 1 ? -1 : stage + 1, stage == 0,
                                 stage == stages - 1};
          const ParamLayout part(config_, shard);
          std::vector<float> expected(part.total());
          for (const ParamTensor& p : part.tensors())
            take_shard(p, full.data() + whole.tensors()[p.global_index].offset,
                       expected.data() + p.offset);
          EXPECT_EQ(load(part, &bytes), expected) << "variant " << variant;
          EXPECT_EQ(static_cast<int64_t>(bytes), width * stored_elements(part))
              << "variant " << variant << " tp rank " << tp_rank << " stage " << stage << "/"
              << stages;
        }
    // ZeRO-3: a part of each tensor (its middle third here), the rest zero; what is read is that
    // part and at most a row of the stored matrix either side of it.
    const ParamLayout part(config_, ModelShard{2, 1, 0, -1, true, true});
    std::vector<float> expected(part.total(), 0.0f);
    int64_t bound = 0;
    const auto third = [](const ParamTensor& p) {
      return std::pair<size_t, size_t>{p.numel / 3, 2 * p.numel / 3};
    };
    for (const ParamTensor& p : part.tensors()) {
      std::vector<float> local(p.numel);
      take_shard(p, full.data() + whole.tensors()[p.global_index].offset, local.data());
      const auto [lo, hi] = third(p);
      std::copy(local.begin() + static_cast<std::ptrdiff_t>(lo),
                local.begin() + static_cast<std::ptrdiff_t>(hi),
                expected.begin() + static_cast<std::ptrdiff_t>(p.offset + lo));
      const int64_t rows = p.global_shape.front(), cols = p.global_shape.back();
      bound += width * (static_cast<int64_t>(hi - lo) + 2 * std::max(rows, cols) * 3);  // 3 mappings at most
    }
    EXPECT_EQ(load(part, &bytes, third), expected) << "variant " << variant;
    EXPECT_LE(static_cast<int64_t>(bytes), bound) << "variant " << variant;
    EXPECT_LT(bytes, width * stored_elements(part) / 2) << "variant " << variant;
  }
}

}  // namespace

namespace {

TEST(HfShardSize, ReadsTransformersMaxShardSize) {
  EXPECT_EQ(parse_shard_size("5GB", "s"), 5000000000u);
  EXPECT_EQ(parse_shard_size("500MB", "s"), 500000000u);
  EXPECT_EQ(parse_shard_size("20kB", "s"), 20000u);
  EXPECT_EQ(parse_shard_size("2GiB", "s"), uint64_t{2} << 30);
  EXPECT_EQ(parse_shard_size("3mib", "s"), 3u << 20);  // transformers compares upper-cased
  EXPECT_EQ(parse_shard_size("4096", "s"), 4096u);
  for (const char* bad : {"", "0", "0GB", "GB", "5 GB", "5Gb", "1.5GB", "-5GB", "5TB", "5G",
                          "9223372036854775809", "9300000000GB"}) {
    try {
      parse_shard_size(bad, "export-hf-shard-size");
      ADD_FAILURE() << "'" << bad << "' was taken";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("export-hf-shard-size = '" + std::string(bad) + "': not a size", 0), 0u)
          << e.what();
    }
  }
}

}  // namespace
