#include "mpitrain/model/hf_model.hpp"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "mpitrain/io/durable.hpp"
#include "mpitrain/io/json_input.hpp"
#include "mpitrain/io/out_file.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/tensor/bf16.hpp"

namespace mpitrain {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors are little-endian");

constexpr const char* kConfig = "config.json";
constexpr const char* kWeights = "model.safetensors";
constexpr uint64_t kMaxHeader = uint64_t{100} << 20;  // safetensors' own limit on the header

// How one HF tensor is made from ours: rows [row0, row0 + rows) of the flat tensor `ours`
// (rows x cols, row-major), transposed for Conv1D, rows permuted per head for RoPE.
struct Mapping {
  std::string hf;
  std::string ours;
  int64_t row0, rows, cols;
  bool transpose = false;
  int rope_head = 0;  // > 0: head size whose rows (a vector's columns) go from interleaved to
                      // rotate-half order
  bool vector = false;  // rows x 1 read as the vector (rows): a slice of a bias
};

// HF row a hs/2 + i of a head comes from our row 2 i + a (see the header).
int64_t rope_source_row(int64_t r, int hs) {
  const int64_t head = r / hs, j = r % hs, half = hs / 2;
  return head * hs + (j < half ? 2 * j : 2 * (j - half) + 1);
}

std::vector<Mapping> mappings(const ModelConfig& c) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff, hs = c.head_size();
  const int64_t q = int64_t(c.n_head) * hs, kv = int64_t(c.n_kv_head) * hs;
  std::vector<Mapping> m;
  auto layer = [](int l, const char* slot) { return "h." + std::to_string(l) + "." + slot; };
  if (c.arch == Arch::Gpt2) {
    m.push_back({"transformer.wte.weight", "wte", 0, V, C});
    m.push_back({"transformer.wpe.weight", "wpe", 0, c.max_seq_len, C});
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string h = "transformer.h." + std::to_string(l) + ".";
      m.push_back({h + "ln_1.weight", layer(l, "ln1.weight"), 0, 1, C});
      m.push_back({h + "ln_1.bias", layer(l, "ln1.bias"), 0, 1, C});
      m.push_back({h + "attn.c_attn.weight", layer(l, "attn.qkv.weight"), 0, 3 * C, C, true});
      m.push_back({h + "attn.c_attn.bias", layer(l, "attn.qkv.bias"), 0, 1, 3 * C});
      m.push_back({h + "attn.c_proj.weight", layer(l, "attn.proj.weight"), 0, C, C, true});
      m.push_back({h + "attn.c_proj.bias", layer(l, "attn.proj.bias"), 0, 1, C});
      m.push_back({h + "ln_2.weight", layer(l, "ln2.weight"), 0, 1, C});
      m.push_back({h + "ln_2.bias", layer(l, "ln2.bias"), 0, 1, C});
      m.push_back({h + "mlp.c_fc.weight", layer(l, "mlp.fc.weight"), 0, F, C, true});
      m.push_back({h + "mlp.c_fc.bias", layer(l, "mlp.fc.bias"), 0, 1, F});
      m.push_back({h + "mlp.c_proj.weight", layer(l, "mlp.proj.weight"), 0, C, F, true});
      m.push_back({h + "mlp.c_proj.bias", layer(l, "mlp.proj.bias"), 0, 1, C});
    }
    m.push_back({"transformer.ln_f.weight", "lnf.weight", 0, 1, C});
    m.push_back({"transformer.ln_f.bias", "lnf.bias", 0, 1, C});
    if (!c.tie_embeddings) m.push_back({"lm_head.weight", "lm_head.weight", 0, V, C});
    return m;
  }
  m.push_back({"model.embed_tokens.weight", "wte", 0, V, C});
  for (int l = 0; l < c.n_layer; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    const std::string qkv = layer(l, "attn.qkv.weight"), fc = layer(l, "mlp.fc.weight");
    const std::string qkv_b = layer(l, "attn.qkv.bias"), fc_b = layer(l, "mlp.fc.bias");
    const int rope = c.head_size();
    m.push_back({h + "input_layernorm.weight", layer(l, "ln1.weight"), 0, 1, C});
    m.push_back({h + "self_attn.q_proj.weight", qkv, 0, q, C, false, rope});
    m.push_back({h + "self_attn.k_proj.weight", qkv, q, kv, C, false, rope});
    m.push_back({h + "self_attn.v_proj.weight", qkv, q + kv, kv, C});
    if (c.qkv_bias) {  // permuted for RoPE as the weights' rows
      m.push_back({h + "self_attn.q_proj.bias", qkv_b, 0, q, 1, false, rope, true});
      m.push_back({h + "self_attn.k_proj.bias", qkv_b, q, kv, 1, false, rope, true});
      m.push_back({h + "self_attn.v_proj.bias", qkv_b, q + kv, kv, 1, false, 0, true});
    }
    m.push_back({h + "self_attn.o_proj.weight", layer(l, "attn.proj.weight"), 0, C, q});
    if (c.proj_bias)
      m.push_back({h + "self_attn.o_proj.bias", layer(l, "attn.proj.bias"), 0, 1, C});
    m.push_back({h + "post_attention_layernorm.weight", layer(l, "ln2.weight"), 0, 1, C});
    m.push_back({h + "mlp.gate_proj.weight", fc, 0, F, C});
    m.push_back({h + "mlp.up_proj.weight", fc, F, F, C});
    m.push_back({h + "mlp.down_proj.weight", layer(l, "mlp.proj.weight"), 0, C, F});
    if (c.qk_norm) {  // Qwen3's per-head norms, in the heads' rotate-half order
      m.push_back({h + "self_attn.q_norm.weight", layer(l, "attn.q_norm.weight"), 0, 1, hs, false,
                   c.head_size()});
      m.push_back({h + "self_attn.k_norm.weight", layer(l, "attn.k_norm.weight"), 0, 1, hs, false,
                   c.head_size()});
    }
    if (c.mlp_bias) {
      m.push_back({h + "mlp.gate_proj.bias", fc_b, 0, F, 1, false, 0, true});
      m.push_back({h + "mlp.up_proj.bias", fc_b, F, F, 1, false, 0, true});
      m.push_back({h + "mlp.down_proj.bias", layer(l, "mlp.proj.bias"), 0, 1, C});
    }
  }
  m.push_back({"model.norm.weight", "lnf.weight", 0, 1, C});
  if (!c.tie_embeddings) m.push_back({"lm_head.weight", "lm_head.weight", 0, V, C});
  return m;
}

// The HF tensor's shape: (rows, cols), (cols, rows) transposed, (cols) for a vector.
std::vector<int64_t> hf_shape(const Mapping& m) {
  if (m.vector) return {m.rows};
  if (m.rows == 1) return {m.cols};
  return m.transpose ? std::vector<int64_t>{m.cols, m.rows} : std::vector<int64_t>{m.rows, m.cols};
}

// Element e of the HF tensor (row-major in hf_shape) -> index into our tensor.
size_t our_index(const Mapping& m, size_t e) {
  int64_t r = static_cast<int64_t>(e) / m.cols, col = static_cast<int64_t>(e) % m.cols;
  if (m.transpose) {  // HF (cols, rows): element (i, o) is our (o, i)
    r = static_cast<int64_t>(e) % m.rows;
    col = static_cast<int64_t>(e) / m.rows;
  }
  if (m.rope_head > 0 && m.rows == 1) col = rope_source_row(col, m.rope_head);
  else if (m.rope_head > 0) r = rope_source_row(r, m.rope_head);
  return static_cast<size_t>((m.row0 + r) * m.cols + col);
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) throw UsageError(file.string() + ": cannot open: " + std::strerror(errno));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw UsageError(file.string() + ": cannot read: " + std::strerror(errno));
  return parse_json_input(text, file.string());
}

int int_field(const JsonFields& j, const fs::path& file, const char* name) {
  const std::optional<int64_t> v = j.integer(name);
  if (!v) throw UsageError(file.string() + ": needs an integer '" + name + "'");
  if (*v < 1 || *v > (int64_t{1} << 28))
    throw UsageError(file.string() + ": '" + name + "' = " + std::to_string(*v) +
                     " is outside [1, 2^28]");
  return static_cast<int>(*v);
}

float float_field(const JsonFields& j, const fs::path& file, const char* name, float fallback) {
  const std::optional<double> v = j.number(name);
  if (!v) return fallback;
  if (!(*v > 0)) throw UsageError(file.string() + ": '" + name + "' must be a positive number");
  return static_cast<float>(*v);
}

// The safetensors file opened for reading: its header and the data region's offset.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const fs::path& file) : file_(file), in_(file, std::ios::binary) {
    if (!in_) throw UsageError(file.string() + ": cannot open: " + std::strerror(errno));
    uint64_t n = 0;
    if (!in_.read(reinterpret_cast<char*>(&n), sizeof n) || n == 0 || n > kMaxHeader)
      throw UsageError(file.string() + ": not a safetensors file (header length)");
    std::string text(n, '\0');
    if (!in_.read(text.data(), static_cast<std::streamsize>(n)))
      throw UsageError(file.string() + ": truncated safetensors header");
    header_ = parse_json_input(text, file.string() + " (its header)");
    require_json_kind(header_.is_object(), header_, file.string(), "the header",
                      "an object {tensor: {dtype, shape, data_offsets}}");
    data_ = sizeof n + n;
    std::error_code ec;
    size_ = fs::file_size(file, ec);
    if (ec) throw UsageError(file.string() + ": " + ec.message());
  }

  // The tensor `name` of `shape`, widened to fp32 (F32, F16 or BF16 in the file).
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) {
    const std::optional<JsonFields> t = JsonFields(header_, file_.string()).member(name);
    if (!t) throw UsageError(file_.string() + ": no tensor " + name);
    const std::string dtype = t->string("dtype").value_or("");
    const std::vector<int64_t> got = t->integers("shape").value_or(std::vector<int64_t>{});
    if (got != shape)
      throw UsageError(file_.string() + ": " + name + " has shape " + json(got).dump() +
                       ", the model needs " + json(shape).dump());
    size_t count = 1;
    for (int64_t d : shape) count *= static_cast<size_t>(d);
    const size_t width = dtype == "F32" ? 4 : dtype == "F16" || dtype == "BF16" ? 2 : 0;
    if (width == 0)
      throw UsageError(file_.string() + ": " + name + " is " + dtype + "; F32, F16 or BF16 only");
    const std::vector<int64_t> off = t->integers("data_offsets").value_or(std::vector<int64_t>{});
    if (off.size() != 2 || off[0] < 0 || off[1] < off[0] ||
        static_cast<uint64_t>(off[1] - off[0]) != count * width ||
        data_ + static_cast<uint64_t>(off[1]) > size_)
      throw UsageError(file_.string() + ": " + name +
                       ": data offsets do not fit its shape or lie "
                       "outside the file");
    std::vector<char> raw(count * width);
    in_.seekg(static_cast<std::streamoff>(data_ + off[0]));
    if (!in_.read(raw.data(), static_cast<std::streamsize>(raw.size())))
      throw UsageError(file_.string() + ": cannot read " + name);
    std::vector<float> out(count);
    if (width == 4) {
      std::memcpy(out.data(), raw.data(), raw.size());
    } else {
      const auto* half = reinterpret_cast<const uint16_t*>(raw.data());
      for (size_t i = 0; i < count; ++i)
        out[i] = dtype == "BF16" ? bf16_to_float(half[i])
                                 : static_cast<float>(std::bit_cast<_Float16>(half[i]));
    }
    return out;
  }

 private:
  fs::path file_;
  std::ifstream in_;
  json header_;
  uint64_t data_ = 0, size_ = 0;
};

// The transformers model_type of a llama-arch model: qwen3 with per-head q/k norms; qwen2 when
// q, k, v have biases and o_proj has none (LlamaForCausalLM's and Qwen3's attention_bias cover all
// four); else llama.
std::string hf_llama_type(const ModelConfig& c) {
  if (c.qk_norm) return "qwen3";
  return c.qkv_bias && !c.proj_bias ? "qwen2" : "llama";
}

// A float as the decimal it was given ("1.1", not 1.100000023841858).
double decimal(float v) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::strtod(std::string(buf, ec == std::errc() ? end : buf).c_str(), nullptr);
}

// transformers' rope_scaling dict (modeling_rope_utils.py), null when unscaled
json rope_scaling_json(const ModelConfig::RopeScaling& r) {
  using Type = ModelConfig::RopeScaling::Type;
  if (r.type == Type::None) return nullptr;
  if (r.type == Type::Linear) return {{"rope_type", "linear"}, {"factor", decimal(r.factor)}};
  return {{"rope_type", "llama3"},
          {"factor", decimal(r.factor)},
          {"low_freq_factor", decimal(r.low_freq_factor)},
          {"high_freq_factor", decimal(r.high_freq_factor)},
          {"original_max_position_embeddings", r.original_max_position}};
}

json config_json(const ModelConfig& c) {
  if (c.arch == Arch::Gpt2)
    return {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"n_layer", c.n_layer},
            {"n_head", c.n_head},
            {"n_embd", c.d_model},
            {"n_inner", c.d_ff},
            {"n_positions", c.max_seq_len},
            {"n_ctx", c.max_seq_len},
            {"vocab_size", c.vocab_size},
            {"layer_norm_epsilon", decimal(c.norm_eps)},
            {"activation_function", "gelu_new"},  // HF's name for the tanh approximation
            {"scale_attn_weights", c.scale_attn_weights},
            {"scale_attn_by_inverse_layer_idx", c.scale_attn_by_inverse_layer_idx},
            {"tie_word_embeddings", c.tie_embeddings},
            {"torch_dtype", "float32"}};
  const std::string type = hf_llama_type(c);
  const char* architecture = type == "qwen3"   ? "Qwen3ForCausalLM"
                             : type == "qwen2" ? "Qwen2ForCausalLM"
                                               : "LlamaForCausalLM";
  json j = {{"architectures", {architecture}},
            {"model_type", type},
            {"num_hidden_layers", c.n_layer},
            {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.n_kv_head},
            {"hidden_size", c.d_model},
            {"head_dim", c.head_size()},
            {"intermediate_size", c.d_ff},
            {"max_position_embeddings", c.max_seq_len},
            {"vocab_size", c.vocab_size},
            {"rms_norm_eps", decimal(c.norm_eps)},
            {"rope_theta", decimal(c.rope_theta)},
            {"rope_scaling", rope_scaling_json(c.rope_scaling)},
            {"hidden_act", "silu"},
            {"tie_word_embeddings", c.tie_embeddings},
            {"torch_dtype", "float32"}};
  if (type != "llama") j["use_sliding_window"] = false;
  if (type != "qwen2") j["attention_bias"] = c.proj_bias;
  if (type == "llama") j["mlp_bias"] = c.mlp_bias;
  return j;
}

}  // namespace

bool is_hf_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kConfig, ec) &&
         fs::is_regular_file(fs::path(path) / kWeights, ec);
}

ModelConfig read_hf_config(const std::string& dir) {
  const fs::path file = fs::path(dir) / kConfig;
  const json doc = read_json(file);
  const JsonFields j(doc, file.string());
  ModelConfig c;
  const std::string type = j.string("model_type").value_or("");
  if (type == "gpt2") {
    c.arch = Arch::Gpt2;
    c.n_layer = int_field(j, file, "n_layer");
    c.n_head = c.n_kv_head = int_field(j, file, "n_head");
    c.d_model = int_field(j, file, "n_embd");
    c.d_ff = j.has("n_inner") ? int_field(j, file, "n_inner") : 4 * c.d_model;
    c.max_seq_len = int_field(j, file, "n_positions");
    c.norm_eps = float_field(j, file, "layer_norm_epsilon", 1e-5f);
    const std::string act = j.string("activation_function").value_or("gelu_new");
    if (act != "gelu_new" && act != "gelu_pytorch_tanh")
      throw UsageError(file.string() + ": activation_function " + act +
                       "; the model computes the tanh GELU (gelu_new)");
  } else if (type == "llama") {
    c.set_arch(Arch::Llama);
    c.n_layer = int_field(j, file, "num_hidden_layers");
    c.n_head = int_field(j, file, "num_attention_heads");
    c.n_kv_head =
        j.has("num_key_value_heads") ? int_field(j, file, "num_key_value_heads") : c.n_head;
    c.d_model = int_field(j, file, "hidden_size");
    c.d_ff = int_field(j, file, "intermediate_size");
    c.max_seq_len = int_field(j, file, "max_position_embeddings");
    c.norm_eps = float_field(j, file, "rms_norm_eps", 1e-6f);
    c.rope_theta = float_field(j, file, "rope_theta", 10000.0f);
    if (j.boolean("tie_word_embeddings").value_or(false))
      throw UsageError(file.string() + ": tied embeddings; the llama model has its own head");
    if (j.has("rope_scaling")) throw UsageError(file.string() + ": rope_scaling is not supported");
    if (j.has("head_dim") && int_field(j, file, "head_dim") * c.n_head != c.d_model)
      throw UsageError(file.string() + ": head_dim x num_attention_heads != hidden_size");
  } else {
    throw UsageError(file.string() + ": model_type '" + type + "'; gpt2 or llama only");
  }
  c.vocab_size = int_field(j, file, "vocab_size");
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(file.string() + " describes an invalid model: " + e.what());
  }
  return c;
}

void load_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                   float* params) {
  SafetensorsReader reader(fs::path(dir) / kWeights);
  std::fill(params, params + layout.total(), 0.0f);  // the vocabulary's padding rows
  for (const Mapping& m : mappings(config)) {
    const std::vector<float> hf = reader.read(m.hf, hf_shape(m));
    float* ours = params + layout.find(m.ours).offset;
    for (size_t e = 0; e < hf.size(); ++e) ours[our_index(m, e)] = hf[e];
  }
}

namespace {

// Copies the tokenizer's files into dir under the names of transformers' tokenizers:
// GPT2Tokenizer's vocab.json + merges.txt, LlamaTokenizer's tokenizer.model,
// PreTrainedTokenizerFast's tokenizer.json + tokenizer_config.json.
void save_hf_tokenizer(const Tokenizer& tok, const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> hf_names = {
      {"encoder", "vocab.json"}, {"merges", "merges.txt"}, {"model", "tokenizer.model"},
      {"tokenizer", "tokenizer.json"}, {"config", "tokenizer_config.json"}};
  for (const TokenizerFile& f : tok.files()) {
    const auto hf = std::find_if(hf_names.begin(), hf_names.end(),
                                 [&](const auto& r) { return r.first == f.role; });
    if (hf == hf_names.end()) continue;  // llm.c's decoder-only file: transformers reads none
    std::error_code ec;
    fs::copy_file(f.path, dir / hf->second, fs::copy_options::overwrite_existing, ec);
    if (ec)
      MPITRAIN_THROW("cannot copy '" + f.path + "' into " + dir.string() + ": " + ec.message());
    fsync_path((dir / hf->second).string());
  }
}

}  // namespace

void require_hf_expressible(const std::string& dir, const ModelConfig& c) {
  if (c.arch == Arch::Gpt2) return;
  const std::string type = hf_llama_type(c);
  require(type == "llama" || !c.mlp_bias,
          dir + ": a " + type + " model (" +
              (type == "qwen3" ? "per-head q/k norms" : "q, k, v biases without an o_proj bias") +
              ") has no MLP biases: mlp-bias cannot be exported");
  require(type != "qwen3" || c.qkv_bias == c.proj_bias,
          dir + ": a qwen3 model (per-head q/k norms) has biases on all of q, k, v and o or on "
                "none: q, k, v biases without the o bias cannot be exported");
}

void save_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                   const float* params, const Tokenizer* tokenizer) {
  require_hf_expressible(dir, config);
  std::error_code ec;
  require(!fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)),
          dir + " exists and is not an empty directory");
  const std::vector<Mapping> all = mappings(config);
  json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const Mapping& m : all) {
    const uint64_t bytes = sizeof(float) * static_cast<uint64_t>(m.rows) * m.cols;
    header[m.hf] = {
        {"dtype", "F32"}, {"shape", hf_shape(m)}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  const std::string tmp = dir + ".tmp";
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  require(!ec, "cannot create " + tmp + ": " + ec.message());

  OutFile weights((fs::path(tmp) / (std::string(kWeights) + ".part")).string());
  const uint64_t n = text.size();
  weights.write(&n, sizeof n);
  weights.write(text.data(), text.size());
  std::vector<float> buf;
  for (const Mapping& m : all) {
    const float* ours = params + layout.find(m.ours).offset;
    buf.resize(static_cast<size_t>(m.rows * m.cols));
    for (size_t e = 0; e < buf.size(); ++e) buf[e] = ours[our_index(m, e)];
    weights.write(buf.data(), buf.size() * sizeof(float));
  }
  weights.commit((fs::path(tmp) / kWeights).string());
  write_file_synced((fs::path(tmp) / kConfig).string(), config_json(config).dump(2) + "\n");
  if (tokenizer) save_hf_tokenizer(*tokenizer, tmp);
  fsync_path(tmp);
  if (fs::exists(dir, ec)) fs::remove(dir, ec);  // the empty directory the check allowed
  rename_durably(tmp, dir);
}

}  // namespace mpitrain
