#include "mpitrain/model/hf_model.hpp"

#include <algorithm>
#include <bit>
#include <cctype>
#include <climits>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <vector>

#include "mpitrain/io/durable.hpp"
#include "mpitrain/io/out_file.hpp"
#include "mpitrain/model/hf_config.hpp"
#include "mpitrain/model/safetensors.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kConfig = "config.json";

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
  bool one_row = false;  // 1 x cols kept a matrix (1, cols): a linear layer of one output
  int64_t rope_rows = 0;  // rope_head's permutation on the first this many rows only (0: all)
};

// Whether the mapping's row r (ours or HF's: a head's rows are the same rows in both) is permuted
// per head for RoPE.
bool rope_row(const Mapping& m, int64_t r) {
  return m.rope_head > 0 && (m.rope_rows == 0 || r < m.rope_rows);
}

// HF row a hs/2 + i of a head comes from our row 2 i + a (see the header).
int64_t rope_source_row(int64_t r, int hs) {
  const int64_t head = r / hs, j = r % hs, half = hs / 2;
  return head * hs + (j < half ? 2 * j : 2 * (j - half) + 1);
}

// gpt2_prefix: "transformer." (transformers' names) or "" (the original gpt2 upload's); fused:
// phi3's names, q/k/v in self_attn.qkv_proj and gate/up in mlp.gate_up_proj (read only).
// Layer l's router and experts (h: its name prefix): mixtral's block_sparse_moe.gate (E, C),
// .experts.<e>.{w1 (gate), w3 (up): (Fe, C), w2 (down): (C, Fe)}; qwen3_moe's mlp.gate and
// mlp.experts.<e>.{gate,up,down}_proj. Ours: router (E, C), experts.fc (E, 2Fe, C) = each
// expert's [gate; up], experts.proj (E, C, Fe), each seen as rows of its last dimension.
void expert_mappings(const ModelConfig& c, int l, const std::string& h, std::vector<Mapping>& m) {
  const int64_t C = c.d_model, E = c.n_experts, Fe = c.expert_width();
  const bool mixtral = hf_model_type(c) == "mixtral";
  const std::string p = "h." + std::to_string(l) + ".moe.";
  const std::string block = h + (mixtral ? "block_sparse_moe." : "mlp.");
  m.push_back({block + "gate.weight", p + "router.weight", 0, E, C});
  for (int64_t e = 0; e < E; ++e) {
    const std::string x = block + "experts." + std::to_string(e) + ".";
    m.push_back({x + (mixtral ? "w1" : "gate_proj") + ".weight", p + "experts.fc.weight",
                 e * 2 * Fe, Fe, C});
    m.push_back({x + (mixtral ? "w3" : "up_proj") + ".weight", p + "experts.fc.weight",
                 e * 2 * Fe + Fe, Fe, C});
    m.push_back({x + (mixtral ? "w2" : "down_proj") + ".weight", p + "experts.proj.weight",
                 e * C, C, Fe});
  }
}

std::vector<Mapping> mappings(const ModelConfig& c, const std::string& gpt2_prefix = "transformer.",
                              bool fused = false) {
  const int64_t C = c.d_model, V = c.vocab_size, F = c.d_ff, hs = c.head_size();
  const int64_t q = int64_t(c.n_head) * hs, kv = int64_t(c.n_kv_head) * hs;
  std::vector<Mapping> m;
  auto layer = [](int l, const char* slot) { return "h." + std::to_string(l) + "." + slot; };
  if (c.arch == Arch::Gpt2) {
    const std::string& p = gpt2_prefix;
    m.push_back({p + "wte.weight", "wte", 0, V, C});
    m.push_back({p + "wpe.weight", "wpe", 0, c.max_seq_len, C});
    for (int l = 0; l < c.n_layer; ++l) {
      const std::string h = p + "h." + std::to_string(l) + ".";
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
    m.push_back({p + "ln_f.weight", "lnf.weight", 0, 1, C});
    m.push_back({p + "ln_f.bias", "lnf.bias", 0, 1, C});
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
    if (fused) {  // [q; k; v] as ours, q's and k's rows permuted
      m.push_back({h + "self_attn.qkv_proj.weight", qkv, 0, q + 2 * kv, C, false, rope, false,
                   false, q + kv});
    } else {
      m.push_back({h + "self_attn.q_proj.weight", qkv, 0, q, C, false, rope});
      m.push_back({h + "self_attn.k_proj.weight", qkv, q, kv, C, false, rope});
      m.push_back({h + "self_attn.v_proj.weight", qkv, q + kv, kv, C});
    }
    if (c.qkv_bias) {  // permuted for RoPE as the weights' rows
      m.push_back({h + "self_attn.q_proj.bias", qkv_b, 0, q, 1, false, rope, true});
      m.push_back({h + "self_attn.k_proj.bias", qkv_b, q, kv, 1, false, rope, true});
      m.push_back({h + "self_attn.v_proj.bias", qkv_b, q + kv, kv, 1, false, 0, true});
    }
    m.push_back({h + "self_attn.o_proj.weight", layer(l, "attn.proj.weight"), 0, C, q});
    if (c.proj_bias)
      m.push_back({h + "self_attn.o_proj.bias", layer(l, "attn.proj.bias"), 0, 1, C});
    m.push_back({h + "post_attention_layernorm.weight", layer(l, "ln2.weight"), 0, 1, C});
    // an MoE layer's: its shared experts (qwen2_moe's one, gated; the others have none)
    const int64_t Fd = c.dense_mlp_width(l);
    const std::string mlp = h + (c.is_moe_layer(l) ? "mlp.shared_expert." : "mlp.");
    if (Fd > 0 && fused) {  // [gate; up] as ours
      m.push_back({mlp + "gate_up_proj.weight", fc, 0, 2 * Fd, C});
    } else if (Fd > 0) {
      m.push_back({mlp + "gate_proj.weight", fc, 0, Fd, C});
      m.push_back({mlp + "up_proj.weight", fc, Fd, Fd, C});
    }
    if (Fd > 0) m.push_back({mlp + "down_proj.weight", layer(l, "mlp.proj.weight"), 0, C, Fd});
    if (c.is_moe_layer(l)) expert_mappings(c, l, h, m);
    if (c.is_moe_layer(l) && c.moe_shared_gate)  // (1, C)
      m.push_back({h + "mlp.shared_expert_gate.weight", layer(l, "moe.shared_gate.weight"), 0, 1, C,
                   false, 0, false, true});
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
  if (m.rows == 1 && !m.one_row) return {m.cols};
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
  else if (rope_row(m, r))
    r = rope_source_row(r, m.rope_head);
  return static_cast<size_t>((m.row0 + r) * m.cols + col);
}

// Element (r, col) of our rows [row0, row0 + rows) -> index into the HF tensor (the inverse of
// our_index).
size_t hf_index(const Mapping& m, int64_t r, int64_t col) {
  const auto rotate_half = [hs = int64_t{m.rope_head}](int64_t x) {  // our 2 i + a -> a hs/2 + i
    const int64_t j = x % hs;
    return x - j + (j % 2) * (hs / 2) + j / 2;
  };
  if (m.rope_head > 0 && m.rows == 1) col = rotate_half(col);  // a per-head vector (q/k norm)
  else if (rope_row(m, r))
    r = rotate_half(r);
  return static_cast<size_t>(m.transpose ? col * m.rows + r : r * m.cols + col);
}

// Stored tensors transformers itself does not load: gpt2's causal-mask buffers, llama's RoPE
// frequencies.
bool skipped_buffer(const std::string& name) {
  const auto ends = [&](const std::string& tail) {
    return name.size() >= tail.size() && name.compare(name.size() - tail.size(), tail.size(), tail) == 0;
  };
  return ends(".attn.bias") || ends(".attn.masked_bias") || ends(".rotary_emb.inv_freq");
}

// The checkpoint's tensors and the mappings into the model, checked against each other.
struct CheckedWeights {
  SafetensorsSet set;
  std::vector<Mapping> mappings;
};

CheckedWeights checked_weights(const std::string& dir, const ModelConfig& config) {
  SafetensorsSet set(dir);
  const bool hub_gpt2 = config.arch == Arch::Gpt2 && set.find("wte.weight") &&
                        !set.find("transformer.wte.weight");
  std::vector<Mapping> all =
      mappings(config, hub_gpt2 ? "" : "transformer.",
               config.arch == Arch::Llama && read_hf_model_type(dir) == "phi3");
  for (const Mapping& m : all) {
    const StoredTensor* t = set.find(m.hf);
    if (!t) throw UsageError(set.source() + ": no tensor " + m.hf);
    if (t->shape != hf_shape(m))
      throw UsageError(t->file + ": " + m.hf + " has shape " + nlohmann::json(t->shape).dump() +
                       ", the model needs " + nlohmann::json(hf_shape(m)).dump());
    if (t->dtype != "F32" && t->dtype != "F16" && t->dtype != "BF16")
      throw UsageError(t->file + ": " + m.hf + " is " + t->dtype + "; F32, F16 or BF16 only");
  }
  for (const auto& [name, t] : set.tensors())
    if (!skipped_buffer(name) &&
        std::none_of(all.begin(), all.end(), [&](const Mapping& m) { return m.hf == name; }))
      throw UsageError(t.file + " holds " + name + ", which the model config.json describes " +
                       "has no place for: refused rather than dropped");
  return {std::move(set), std::move(all)};
}

}  // namespace

bool is_hf_dir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / kConfig, ec) &&
         SafetensorsSet::present(path);
}

void check_hf_weights(const std::string& dir, const ModelConfig& config) {
  checked_weights(dir, config);
}

namespace {

// The HF tensor as a matrix: element hf_index(m, r, col) is at (index / width, index % width).
int64_t hf_width(const Mapping& m) { return m.transpose ? m.rows : m.cols; }

// Columns [col, col + n) of the mapping's row r (relative to row0), at our local index l.
struct Segment {
  int64_t r, col, n;
  uint64_t l;
};

// The segments of p's local elements [wanted.first, wanted.second) that the mapping fills, in
// local order.
std::vector<Segment> segments(const ParamTensor& p, const Mapping& m,
                              std::pair<size_t, size_t> wanted) {
  std::vector<Segment> out;
  const auto cols = static_cast<uint64_t>(m.cols);  // our full tensor seen as rows of m.cols
  for_each_run(p, [&](uint64_t g, uint64_t l, uint64_t n) {
    const uint64_t lo = std::max<uint64_t>(l, wanted.first), hi = std::min<uint64_t>(l + n, wanted.second);
    for (uint64_t at = lo; at < hi;) {
      const uint64_t e = g + (at - l), col = e % cols, take = std::min(hi - at, cols - col);
      const int64_t r = static_cast<int64_t>(e / cols) - m.row0;
      if (r >= 0 && r < m.rows)
        out.push_back({r, static_cast<int64_t>(col), static_cast<int64_t>(take), at});
      at += take;
    }
  });
  return out;
}

// A rectangle of the HF matrix: rows [r0, r1], columns [c0, c1].
struct Box {
  int64_t r0, r1, c0, c1;
  int64_t area() const { return (r1 - r0 + 1) * (c1 - c0 + 1); }
};

// What a segment needs: part of one HF row (or of one column, transposed) between its ends'
// images; the whole row when the mapping permutes a vector's columns (the q/k norms).
Box segment_box(const Mapping& m, const Segment& s) {
  const int64_t width = hf_width(m);
  if (m.rope_head > 0 && m.rows == 1) return {0, 0, 0, width - 1};
  const auto a = static_cast<int64_t>(hf_index(m, s.r, s.col)),
             b = static_cast<int64_t>(hf_index(m, s.r, s.col + s.n - 1));
  return {std::min(a, b) / width, std::max(a, b) / width, std::min(a % width, b % width),
          std::max(a % width, b % width)};
}

// The boxes to read for the segments, each with the segments it serves [first, end): one box
// when their bounding box holds nothing else (whole rows, heads, a tp slice of rows or
// columns); else the runs of segments that extend a rectangle by a row or a column (gpt2's
// Conv1D c_attn, whose q, k and v columns each give a rank a slice).
std::vector<std::pair<Box, size_t>> boxes(const Mapping& m, const std::vector<Segment>& segs) {
  std::vector<std::pair<Box, size_t>> out;
  if (segs.empty()) return out;
  Box all = segment_box(m, segs[0]);
  int64_t needed = 0;
  for (const Segment& s : segs) {
    const Box b = segment_box(m, s);
    all = {std::min(all.r0, b.r0), std::max(all.r1, b.r1), std::min(all.c0, b.c0),
           std::max(all.c1, b.c1)};
    needed += b.area();
  }
  if (needed == all.area()) return {{all, 0}};
  for (size_t i = 0; i < segs.size(); ++i) {
    const Box b = segment_box(m, segs[i]);
    Box* cur = out.empty() ? nullptr : &out.back().first;
    if (cur && b.c0 == cur->c0 && b.c1 == cur->c1 && b.r0 == cur->r1 + 1) {
      cur->r1 = b.r1;  // the next rows
    } else if (cur && b.r0 == cur->r0 && b.r1 == cur->r1 && b.c0 == cur->c1 + 1) {
      cur->c1 = b.c1;  // the next columns
    } else {
      out.push_back({b, i});
    }
  }
  return out;
}

}  // namespace

uint64_t load_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                       const std::function<void(const ParamTensor&, const float*)>& put,
                       const std::function<std::pair<size_t, size_t>(const ParamTensor&)>& wanted) {
  const CheckedWeights w = checked_weights(dir, config);
  std::vector<float> ours, block;
  uint64_t bytes_read = 0;
  for (const ParamTensor& p : layout.tensors()) {
    ours.assign(p.numel, 0.0f);  // the vocabulary's padding rows stay zero
    const std::pair<size_t, size_t> part = wanted ? wanted(p) : std::pair<size_t, size_t>{0, p.numel};
    for (const Mapping& m : w.mappings) {
      if (m.ours != p.name) continue;
      const std::vector<Segment> segs = segments(p, m, part);
      const std::vector<std::pair<Box, size_t>> reads = boxes(m, segs);
      const int64_t width = hf_width(m);
      for (size_t k = 0; k < reads.size(); ++k) {
        const Box& b = reads[k].first;
        const size_t end = k + 1 < reads.size() ? reads[k + 1].second : segs.size();
        block.resize(static_cast<size_t>(b.area()));
        bytes_read += w.set.read_block(*w.set.find(m.hf),
                                       {width, b.r0, b.r1 - b.r0 + 1, b.c0, b.c1 - b.c0 + 1},
                                       block.data());
        for (size_t i = reads[k].second; i < end; ++i)
          for (int64_t e = 0; e < segs[i].n; ++e) {
            const auto h = static_cast<int64_t>(hf_index(m, segs[i].r, segs[i].col + e));
            ours[segs[i].l + static_cast<uint64_t>(e)] = block[static_cast<size_t>(
                (h / width - b.r0) * (b.c1 - b.c0 + 1) + h % width - b.c0)];
          }
      }
    }
    put(p, ours.data());
  }
  return bytes_read;
}

namespace {

// Copies the tokenizer's files into dir under the names of transformers' tokenizers:
// GPT2Tokenizer's vocab.json + merges.txt, LlamaTokenizer's tokenizer.model,
// PreTrainedTokenizerFast's tokenizer.json + tokenizer_config.json, and the chat template
// (chat_template.jinja, which transformers takes over tokenizer_config.json's).
void save_hf_tokenizer(const Tokenizer& tok, const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> hf_names = {
      {"encoder", "vocab.json"},           {"merges", "merges.txt"},
      {"model", "tokenizer.model"},        {"tokenizer", "tokenizer.json"},
      {"config", "tokenizer_config.json"}, {"chat_template", kChatTemplateFile}};
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

uint64_t parse_shard_size(const std::string& text, const std::string& option) {
  const std::vector<std::pair<std::string, uint64_t>> units = {
      {"KiB", uint64_t{1} << 10}, {"MiB", uint64_t{1} << 20}, {"GiB", uint64_t{1} << 30},
      {"KB", 1000},               {"MB", 1000 * 1000},        {"GB", 1000 * 1000 * 1000}};
  const auto bad = [&] {
    return UsageError(option + " = '" + text + "': not a size; give bytes as an integer, or one "
                      "followed by KB, MB, GB (1000s) or KiB, MiB, GiB (1024s), as \"5GB\"");
  };
  const size_t digits = std::min(text.find_first_not_of("0123456789"), text.size());
  if (digits == 0) throw bad();
  uint64_t scale = 1;
  if (digits < text.size()) {
    std::string unit = text.substr(digits);
    const auto upper = [](std::string x) {
      for (char& ch : x) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
      return x;
    };
    const auto u = std::find_if(units.begin(), units.end(),
                                [&](const auto& x) { return upper(x.first) == upper(unit); });
    // transformers reads a lowercase b after KB, MB, GB as bits: refused here as unclear
    if (u == units.end() || (unit.size() == 2 && unit[1] == 'b')) throw bad();
    scale = u->second;
  }
  if (std::min(text.find_first_not_of('0'), text.size()) == digits || digits > 18)
    throw bad();  // zero, or past 2^63 whatever the unit
  const uint64_t n = std::stoull(text.substr(0, digits));
  if (n > (uint64_t{1} << 63) / scale) throw bad();
  return n * scale;
}

void require_hf_expressible(const std::string& dir, const ModelConfig& c) {
  if (c.arch == Arch::Gpt2) return;
  const std::string type = hf_model_type(c);
  require(c.sliding_window == 0 || type == "mistral" || type == "mixtral",
          dir + ": the sliding window of " + std::to_string(c.sliding_window) +
              " tokens is written only as a mistral or mixtral model, which have no biases");
  require(c.n_experts == 0 || c.n_shared_experts == 0 || c.moe_shared_gate,
          dir +
              ": mixtral and qwen3_moe have no shared experts, qwen2_moe's is gated: "
              "n-shared-experts without --moe-shared-expert-gate cannot be exported");
  require(type != "qwen2_moe" || (!c.qk_norm && !c.proj_bias),
          dir +
              ": a qwen2_moe model (a gated shared expert) has no per-head q/k norms and no o "
              "bias: --qk-norm or --attention-bias cannot be exported with "
              "--moe-shared-expert-gate");
  require(!c.moe_sigmoid && !c.moe_expert_bias && c.moe_route_scale == 1 && c.moe_groups == 1,
          dir +
              ": mixtral, qwen2_moe and qwen3_moe route by a softmax, unbiased, unscaled and "
              "ungrouped: --moe-router-score sigmoid, --moe-expert-bias, --moe-route-scale and "
              "--moe-router-groups cannot be exported (transformers' classes with them, "
              "DeepSeek-V3's and GLM-4.5's, need multi-head latent or partial-rotary attention, "
              "which the trainer has not)");
  require(type != "mixtral" ||
              (c.moe_every == 1 && c.moe_first_dense == 0 && !c.qkv_bias && !c.proj_bias),
          dir +
              ": a mixtral model (experts without per-head q/k norms) has experts in every "
              "layer and no attention biases: moe-every > 1, moe-first-dense or biases cannot "
              "be exported");
  require(type != "mixtral" || c.moe_norm_topk,
          dir +
              ": a mixtral model (experts without per-head q/k norms) renormalises its gates: "
              "--moe-norm-topk false cannot be exported (a qwen3_moe model, with --qk-norm, "
              "writes it as norm_topk_prob)");
  require(type == "llama" || !c.mlp_bias,
          dir + ": a " + type + " model (" +
              (type == "qwen3" ? "per-head q/k norms" : "q, k, v biases without an o_proj bias") +
              ") has no MLP biases: mlp-bias cannot be exported");
  require((type != "qwen3" && type != "qwen3_moe") || c.qkv_bias == c.proj_bias,
          dir + ": a " + type +
              " model (per-head q/k norms) has biases on all of q, k, v and o "
              "or on none: q, k, v biases without the o bias cannot be exported");
}

void save_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                   const float* params, const Tokenizer* tokenizer, uint64_t max_file_bytes,
                   const HfRouterKeys& router) {
  require_hf_expressible(dir, config);
  std::error_code ec;
  require(!fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec)),
          dir + " exists and is not an empty directory");
  const std::vector<Mapping> all = mappings(config);
  const auto bytes_of = [](const Mapping& m) {
    return sizeof(float) * static_cast<uint64_t>(m.rows) * static_cast<uint64_t>(m.cols);
  };
  // The files: consecutive tensors, a new file where the next would pass max_file_bytes.
  std::vector<std::vector<const Mapping*>> files(1);
  uint64_t in_file = 0, total = 0;
  for (const Mapping& m : all) {
    if (in_file > 0 && in_file + bytes_of(m) > max_file_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(&m);
    in_file += bytes_of(m);
    total += bytes_of(m);
  }
  const std::string tmp = dir + ".tmp";
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  require(!ec, "cannot create " + tmp + ": " + ec.message());

  json weight_map = json::object();
  std::vector<float> buf;
  for (size_t f = 0; f < files.size(); ++f) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", f + 1, files.size());
    const std::string file = files.size() == 1 ? kSafetensorsFile : name;
    json header = {{"__metadata__", {{"format", "pt"}}}};
    uint64_t offset = 0;
    for (const Mapping* m : files[f]) {
      header[m->hf] = {{"dtype", "F32"},
                       {"shape", hf_shape(*m)},
                       {"data_offsets", {offset, offset + bytes_of(*m)}}};
      offset += bytes_of(*m);
      weight_map[m->hf] = file;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
    OutFile weights((fs::path(tmp) / (file + ".part")).string());
    const uint64_t n = text.size();
    weights.write(&n, sizeof n);
    weights.write(text.data(), text.size());
    for (const Mapping* m : files[f]) {
      const float* ours = params + layout.find(m->ours).offset;
      buf.resize(static_cast<size_t>(m->rows * m->cols));
      for (size_t e = 0; e < buf.size(); ++e) buf[e] = ours[our_index(*m, e)];
      weights.write(buf.data(), buf.size() * sizeof(float));
    }
    weights.commit((fs::path(tmp) / file).string());
  }
  if (files.size() > 1) {
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_file_synced((fs::path(tmp) / kSafetensorsIndex).string(), index.dump(2) + "\n");
  }
  const std::optional<uint32_t> token = tokenizer ? tokenizer->document_start() : std::nullopt;
  write_file_synced((fs::path(tmp) / kConfig).string(),
                    hf_config_json(config, token, router).dump(2) + "\n");
  if (tokenizer) save_hf_tokenizer(*tokenizer, tmp);
  fsync_path(tmp);
  if (fs::exists(dir, ec)) fs::remove(dir, ec);  // the empty directory the check allowed
  rename_durably(tmp, dir);
}

}  // namespace mpitrain
