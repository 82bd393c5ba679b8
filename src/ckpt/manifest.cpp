// The checkpoint manifest: its attributes, their checksum and their ranges.
#include <cmath>
#include <limits>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/monitor/crc32c.hpp"

namespace mpitrain {

namespace {

// The "version" of a field that any version may hold or lack (written, read, printed and
// checksummed only when not empty or 0), so that files from before it still read.
constexpr int kOptionalField = 0;

// A model field that older files lack: written and printed only when it is not its default for
// the model's arch (ModelConfig::set_arch; read before it), which an absent attribute then means,
// so files from before it read as the default and their checksums stay as they were.
template <class V>
struct ArchDefault {
  V value;
};

// Calls f(attribute name, field, format version that added it) for every field, in file order
// (one list for write, read, print).
template <class M, class F>
void for_each_field(M& m, F&& f) {
  f("format_version", m.format_version, 1);
  f("step", m.step, 1);
  f("consumed_samples", m.consumed_samples, 1);
  f("seed", m.seed, 1);
  f("optimizer", m.optimizer, 2);
  f("adam_steps", m.adam_steps, 1);
  f("loss_scale", m.loss_scale, 1);
  f("loss_scale_clean_steps", m.loss_scale_clean_steps, 2);
  f("skipped_steps", m.skipped_steps, 2);
  f("val_loss", m.val_loss, 1);
  f("arch", m.model.arch, 1);
  f("n_layer", m.model.n_layer, 1);
  f("n_head", m.model.n_head, 1);
  f("n_kv_head", m.model.n_kv_head, 1);
  f("d_model", m.model.d_model, 1);
  f("d_ff", m.model.d_ff, 1);
  f("vocab_size", m.model.vocab_size, 1);
  f("max_seq_len", m.model.max_seq_len, 1);
  f("norm_eps", m.model.norm_eps, 1);
  f("rope_theta", m.model.rope_theta, 1);
  const auto arch_default = [&m](auto member) {
    ModelConfig d;
    d.set_arch(m.model.arch);
    return ArchDefault{d.*member};
  };
  f("tie_embeddings", m.model.tie_embeddings, arch_default(&ModelConfig::tie_embeddings));
  f("qkv_bias", m.model.qkv_bias, arch_default(&ModelConfig::qkv_bias));
  f("proj_bias", m.model.proj_bias, arch_default(&ModelConfig::proj_bias));
  f("mlp_bias", m.model.mlp_bias, arch_default(&ModelConfig::mlp_bias));
  f("head_dim", m.model.head_dim, arch_default(&ModelConfig::head_dim));
  f("dp", m.layout.dp, 1);
  f("tp", m.layout.tp, 1);
  f("pp", m.layout.pp, 1);
  f("pp_layers", m.pp_layers, 1);
  f("global_batch_size", m.global_batch_size, 1);
  f("micro_batch_size", m.micro_batch_size, 1);
  f("seq_len", m.seq_len, 1);
  f("build_id", m.build_id, 1);
  f("wall_time", m.wall_time, 1);
  f("data", m.data, kOptionalField);
  f("lr_decay_steps", m.lr_decay_steps, kOptionalField);
  // attention variants (config.hpp): absent = the default
  f("qk_norm", m.model.qk_norm, arch_default(&ModelConfig::qk_norm));
  f("rope_scaling", m.model.rope_scaling, kOptionalField);
  f("scale_attn_weights", m.model.scale_attn_weights,
    arch_default(&ModelConfig::scale_attn_weights));
  f("scale_attn_by_inverse_layer_idx", m.model.scale_attn_by_inverse_layer_idx,
    arch_default(&ModelConfig::scale_attn_by_inverse_layer_idx));
  // mixture of experts (config.hpp): absent = the default (n_experts 0: dense)
  f("n_experts", m.model.n_experts, arch_default(&ModelConfig::n_experts));
  f("top_k", m.model.top_k, arch_default(&ModelConfig::top_k));
  f("moe_ff", m.model.moe_ff, arch_default(&ModelConfig::moe_ff));
  f("n_shared_experts", m.model.n_shared_experts, arch_default(&ModelConfig::n_shared_experts));
  f("moe_shared_gate", m.model.moe_shared_gate, arch_default(&ModelConfig::moe_shared_gate));
  f("moe_every", m.model.moe_every, arch_default(&ModelConfig::moe_every));
  f("moe_first_dense", m.model.moe_first_dense, arch_default(&ModelConfig::moe_first_dense));
  f("moe_norm_topk", m.model.moe_norm_topk, arch_default(&ModelConfig::moe_norm_topk));
  f("moe_sigmoid", m.model.moe_sigmoid, arch_default(&ModelConfig::moe_sigmoid));
  f("moe_expert_bias", m.model.moe_expert_bias, arch_default(&ModelConfig::moe_expert_bias));
  f("moe_route_scale", m.model.moe_route_scale, arch_default(&ModelConfig::moe_route_scale));
  f("moe_groups", m.model.moe_groups, arch_default(&ModelConfig::moe_groups));
  f("moe_group_topk", m.model.moe_group_topk, arch_default(&ModelConfig::moe_group_topk));
  f("sliding_window", m.model.sliding_window, arch_default(&ModelConfig::sliding_window));
  f("moe_aux_loss_coef", m.moe_aux_loss_coef, kOptionalField);  // absent: not recorded (-1)
  f("moe_z_loss_coef", m.moe_z_loss_coef, kOptionalField);
  f("shuffle", m.shuffle, kOptionalField);
  f("settings", m.settings, kOptionalField);
}

using RopeType = ModelConfig::RopeScaling::Type;

struct FieldWriter {
  hid_t group;
  void operator()(const char* n, int64_t v, int since) const {
    if (since != kOptionalField || v != 0) write_attribute_int(group, n, v);
  }
  void operator()(const char* n, int v, int) const { write_attribute_int(group, n, v); }
  void operator()(const char* n, uint64_t v, int) const { write_attribute_uint64(group, n, v); }
  void operator()(const char* n, double v, int since) const {
    if (since != kOptionalField || v != -1) write_attribute_double(group, n, v);
  }
  void operator()(const char* n, float v, int) const { write_attribute_double(group, n, v); }
  void operator()(const char* n, const std::string& v, int since) const {
    if (since != kOptionalField || !v.empty()) write_attribute_string(group, n, v);
  }
  void operator()(const char* n, Arch v, int) const {
    write_attribute_string(group, n, to_string(v));
  }
  void operator()(const char* n, OptimizerKind v, int) const {
    write_attribute_string(group, n, to_string(v));
  }
  template <class V>
  void operator()(const char* n, V v, ArchDefault<V> d) const {
    if (v != d.value) write_attribute_int(group, n, v);
  }
  void operator()(const char* n, float v, ArchDefault<float> d) const {
    if (v != d.value) write_attribute_double(group, n, v);
  }
  void operator()(const char* n, const ModelConfig::RopeScaling& v, int) const {
    if (v.type != RopeType::None) write_attribute_string(group, n, to_string(v));
  }
};

struct FieldReader {
  hid_t group;
  const int64_t* version;  // the file's format version (its field is read first)
  template <class V>
  void operator()(const char* n, V& v, int since) const {
    if (since > *version) return;  // not in files of this version: the default stands
    if (since == kOptionalField && !has_attribute(group, n)) return;
    if (!has_attribute(group, n))
      throw Error("manifest attribute '" + std::string(n) + "' is missing");
    read(n, v);
  }
  template <class V>
  void operator()(const char* n, V& v, ArchDefault<V> d) const {
    v = d.value;
    if (has_attribute(group, n)) read(n, v);
  }
  void read(const char* n, bool& v) const {
    const int64_t x = read_attribute_int(group, n);
    if (x != 0 && x != 1)
      throw Error("manifest attribute '" + std::string(n) + "' = " + std::to_string(x) +
                  " is not 0 or 1");
    v = x == 1;
  }
  void read(const char* n, int64_t& v) const { v = read_attribute_int(group, n); }
  void read(const char* n, int& v) const {
    const int64_t x = read_attribute_int(group, n);
    if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
      throw Error("manifest attribute '" + std::string(n) + "' = " + std::to_string(x) +
                  " is out of range");
    v = static_cast<int>(x);
  }
  void read(const char* n, uint64_t& v) const { v = read_attribute_uint64(group, n); }
  void read(const char* n, double& v) const { v = read_attribute_double(group, n); }
  void read(const char* n, float& v) const {
    v = static_cast<float>(read_attribute_double(group, n));
  }
  void read(const char* n, std::string& v) const { v = read_attribute_string(group, n); }
  void read(const char* n, Arch& v) const { v = parse_arch(read_attribute_string(group, n)); }
  void read(const char* n, OptimizerKind& v) const {
    v = parse_optimizer(read_attribute_string(group, n));
  }
  void read(const char* n, ModelConfig::RopeScaling& v) const {
    try {
      v = parse_rope_scaling(read_attribute_string(group, n));
    } catch (const UsageError& e) {
      throw Error(std::string("manifest attribute '") + n + "': " + e.what());
    }
  }
};

struct FieldPrinter {
  std::vector<std::pair<std::string, std::string>>* out;
  void add(const char* n, std::string v) const { out->emplace_back(n, std::move(v)); }
  void operator()(const char* n, int64_t v, int since) const {
    if (since != kOptionalField || v != 0) add(n, std::to_string(v));
  }
  void operator()(const char* n, int v, int) const { add(n, std::to_string(v)); }
  void operator()(const char* n, uint64_t v, int) const { add(n, std::to_string(v)); }
  void operator()(const char* n, double v, int since) const {
    if (since != kOptionalField || v != -1) add(n, shortest_text(v));
  }
  void operator()(const char* n, float v, int) const { add(n, shortest_text(v)); }
  void operator()(const char* n, const std::string& v, int since) const {
    if (since != kOptionalField || !v.empty()) add(n, v);
  }
  void operator()(const char* n, Arch v, int) const { add(n, to_string(v)); }
  void operator()(const char* n, OptimizerKind v, int) const { add(n, to_string(v)); }
  template <class V>
  void operator()(const char* n, V v, ArchDefault<V> d) const {
    if (v != d.value) add(n, std::to_string(v));
  }
  void operator()(const char* n, float v, ArchDefault<float> d) const {
    if (v != d.value) add(n, shortest_text(v));
  }
  void operator()(const char* n, const ModelConfig::RopeScaling& v, int) const {
    if (v.type != RopeType::None) add(n, to_string(v));
  }
};

}  // namespace

namespace {

// The manifest's fields as one text ("name=value\n" each, the printed values: the shortest text
// that reads back as each number), the input of its checksum: the checksum then covers the
// values as read, whatever the attributes' integer widths.
uint64_t manifest_checksum(const CheckpointManifest& m) {
  std::string text;
  for (const auto& [name, value] : manifest_fields(m)) {
    text += name;
    text += '=';
    text += value;
    text += '\n';
  }
  return crc32c(text.data(), text.size());
}

[[noreturn]] void out_of_range(const std::string& name, const std::string& value,
                               const std::string& rule) {
  throw Error("manifest " + name + " " + value + " is out of range: " + rule);
}

void check_count(const char* name, int64_t value, int64_t lo, int64_t hi, const std::string& rule) {
  if (value < lo || value > hi) out_of_range(name, std::to_string(value), rule);
}

// Every field within what a save can write; Error naming the first that is not.
void check_ranges(const CheckpointManifest& m) {
  constexpr int64_t kMaxStep = std::numeric_limits<int>::max();  // the trainer counts in int
  check_count("step", m.step, 0, kMaxStep, "must be from 0 to " + std::to_string(kMaxStep));
  const uint64_t max_samples = std::numeric_limits<int64_t>::max();
  if (m.consumed_samples < static_cast<uint64_t>(m.step) || m.consumed_samples > max_samples)
    out_of_range("consumed_samples",
                 std::to_string(m.consumed_samples) +
                     (m.consumed_samples > max_samples
                          ? " (" + std::to_string(static_cast<int64_t>(m.consumed_samples)) +
                                " as a signed number)"
                          : ""),
                 "must be from step (" + std::to_string(m.step) +
                     ", a sample per step at least) to " + std::to_string(max_samples));
  const std::string within_step = "must be from 0 to step (" + std::to_string(m.step) + ")";
  check_count("adam_steps", m.adam_steps, 0, m.step, within_step);
  check_count("skipped_steps", m.skipped_steps, 0, m.step - m.adam_steps,
              "must be from 0 to step - adam_steps (" + std::to_string(m.step - m.adam_steps) +
                  "): a step either updates or is skipped");
  check_count("loss_scale_clean_steps", m.loss_scale_clean_steps, 0, m.step, within_step);
  if (!std::isfinite(m.loss_scale) || m.loss_scale <= 0)
    out_of_range("loss_scale", shortest_text(m.loss_scale), "must be a positive finite number");
  if (!std::isnan(m.val_loss) && !(m.val_loss >= 0))
    out_of_range("val_loss", shortest_text(m.val_loss), "must be a loss (>= 0) or NaN (none yet)");
  try {
    m.model.validate();
  } catch (const UsageError& e) {
    throw Error(std::string("manifest model: ") + e.what());
  }
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  check_count("dp", m.layout.dp, 1, kMax, "must be at least 1");
  check_count("tp", m.layout.tp, 1, kMax, "must be at least 1");
  check_count("pp", m.layout.pp, 1, kMax, "must be at least 1");
  check_count("global_batch_size", m.global_batch_size, 1, kMax, "must be at least 1");
  check_count("micro_batch_size", m.micro_batch_size, 1, m.global_batch_size,
              "must be from 1 to global_batch_size (" + std::to_string(m.global_batch_size) + ")");
  check_count("lr_decay_steps", m.lr_decay_steps, 0, kMax, "must be from 0 (not recorded) to " +
              std::to_string(kMax));
  for (const auto& [name, coef] : {std::pair{"moe_aux_loss_coef", m.moe_aux_loss_coef},
                                   std::pair{"moe_z_loss_coef", m.moe_z_loss_coef}})
    if (coef != -1 && !(std::isfinite(coef) && coef >= 0))
      out_of_range(name, shortest_text(coef),
                   "must be a finite number >= 0 (absent: not recorded)");
  if (!m.shuffle.empty() && m.shuffle != "true" && m.shuffle != "false")
    out_of_range("shuffle", m.shuffle, "must be true or false (absent: not recorded)");
  check_count("seq_len", m.seq_len, 1, m.model.max_seq_len,
              "must be from 1 to max_seq_len (" + std::to_string(m.model.max_seq_len) + ")");
}

// The expert bias table's dataset in /manifest, its shape (MoE layers, experts) for model c.
constexpr const char* kExpertBias = "expert_bias";
std::vector<uint64_t> expert_bias_shape(const ModelConfig& c) {
  return {static_cast<uint64_t>(c.moe_layers(0, c.n_layer)), static_cast<uint64_t>(c.n_experts)};
}

// The table of a --moe-expert-bias model from group into m.expert_bias: present exactly when the
// model has one, float32 of its shape, its checksum attribute the data's, every value finite.
void read_expert_bias(hid_t group, CheckpointManifest& m) {
  const std::string path = std::string("/") + kManifestGroup + "/" + kExpertBias;
  if (!m.model.moe_expert_bias) {
    if (has_link(group, kExpertBias))
      throw Error("dataset " + path + " is present, and the model has no expert bias");
    return;
  }
  const std::vector<uint64_t> shape = expert_bias_shape(m.model);
  uint64_t stored = 0;
  H5Handle dset = open_tensor(group, path, &shape, stored);  // present, float32, the shape
  m.expert_bias.resize(shape[0] * shape[1]);
  H5_CHECK(
      H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, m.expert_bias.data()));
  const uint64_t computed = checksum(m.expert_bias.data(), 0, m.expert_bias.size());
  if (computed != stored)
    throw Error("dataset " + path + ": checksum mismatch (stored " + hex_text(stored) +
                ", computed " + hex_text(computed) + ")");
  for (float b : m.expert_bias)
    if (!std::isfinite(b)) throw Error("dataset " + path + " holds " + shortest_text(b));
}

}  // namespace

void write_manifest(hid_t file, const CheckpointManifest& m, bool write_tables) {
  H5Handle group(H5_CHECK(H5Gcreate2(file, kManifestGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  for_each_field(m, FieldWriter{group.get()});
  write_attribute_uint64(group.get(), kChecksumAttribute, manifest_checksum(m));
  if (m.expert_bias.empty()) return;
  const std::vector<uint64_t> shape = expert_bias_shape(m.model);
  if (m.expert_bias.size() != shape[0] * shape[1])
    MPITRAIN_THROW("the expert bias table has " + std::to_string(m.expert_bias.size()) +
                   " values, not the model's MoE layers x experts");
  H5Handle dset = create_dataset(group.get(), kExpertBias, H5T_IEEE_F32LE, shape);
  if (write_tables)
    H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                      m.expert_bias.data()));
  write_attribute_uint64(dset.get(), kChecksumAttribute,
                         checksum(m.expert_bias.data(), 0, m.expert_bias.size()));
}

CheckpointManifest read_manifest(hid_t file) {
  if (!has_link(file, kManifestGroup)) throw Error("the group /manifest is missing");
  H5Handle group(H5_CHECK(H5Gopen2(file, kManifestGroup, H5P_DEFAULT)));
  CheckpointManifest m;
  try {
    FieldReader{group.get(), &kCheckpointFormatVersion}("format_version", m.format_version, 1);
    if (m.format_version < 1 || m.format_version > kCheckpointFormatVersion)
      throw Error("manifest format_version " + std::to_string(m.format_version) +
                  ", this build reads 1 to " + std::to_string(kCheckpointFormatVersion));
    for_each_field(m, FieldReader{group.get(), &m.format_version});
    check_ranges(m);
    read_expert_bias(group.get(), m);
    // Present: always checked, so that a flipped format_version cannot pass for an older file.
    const bool has_sum = has_attribute(group.get(), kChecksumAttribute);
    if (!has_sum && m.format_version >= kManifestChecksumVersion)
      throw Error("manifest has no checksum (format version " + std::to_string(m.format_version) +
                  " files have one)");
    const uint64_t computed = manifest_checksum(m);
    const uint64_t stored = has_sum ? read_attribute_uint64(group.get(), kChecksumAttribute) : 0;
    if (has_sum && stored != computed)
      throw Error("manifest checksum mismatch (stored " + hex_text(stored) + ", computed " +
                  hex_text(computed) + "): an attribute of /manifest was changed");
  } catch (const Error& e) {  // a wrong attribute type is a UsageError in io/: here it is damage
    throw Error(e.what());
  }
  return m;
}

std::vector<std::pair<std::string, std::string>> manifest_fields(const CheckpointManifest& m) {
  std::vector<std::pair<std::string, std::string>> out;
  for_each_field(m, FieldPrinter{&out});
  if (!m.expert_bias.empty())  // the table by its checksum, which the manifest's covers
    out.emplace_back(kExpertBias, "checksum " + hex_text(checksum(m.expert_bias.data(), 0,
                                                                  m.expert_bias.size())));
  return out;
}

std::string model_differences(const ModelConfig& a, const ModelConfig& b) {
  std::string diff;
  auto cmp = [&](const char* name, const std::string& x, const std::string& y) {
    if (x == y) return;
    if (!diff.empty()) diff += ", ";
    diff += std::string(name) + " " + x + " vs " + y;
  };
  cmp("arch", to_string(a.arch), to_string(b.arch));
  cmp("n_layer", std::to_string(a.n_layer), std::to_string(b.n_layer));
  cmp("n_head", std::to_string(a.n_head), std::to_string(b.n_head));
  cmp("n_kv_head", std::to_string(a.n_kv_head), std::to_string(b.n_kv_head));
  cmp("d_model", std::to_string(a.d_model), std::to_string(b.d_model));
  cmp("d_ff", std::to_string(a.d_ff), std::to_string(b.d_ff));
  cmp("vocab_size", std::to_string(a.vocab_size), std::to_string(b.vocab_size));
  cmp("max_seq_len", std::to_string(a.max_seq_len), std::to_string(b.max_seq_len));
  cmp("tie_embeddings", std::to_string(a.tie_embeddings), std::to_string(b.tie_embeddings));
  cmp("qkv_bias", std::to_string(a.qkv_bias), std::to_string(b.qkv_bias));
  cmp("proj_bias", std::to_string(a.proj_bias), std::to_string(b.proj_bias));
  cmp("mlp_bias", std::to_string(a.mlp_bias), std::to_string(b.mlp_bias));
  cmp("head_size", std::to_string(a.head_size()), std::to_string(b.head_size()));
  cmp("qk_norm", std::to_string(a.qk_norm), std::to_string(b.qk_norm));
  cmp("rope_scaling", to_string(a.rope_scaling), to_string(b.rope_scaling));
  cmp("scale_attn_weights", std::to_string(a.scale_attn_weights),
      std::to_string(b.scale_attn_weights));
  cmp("scale_attn_by_inverse_layer_idx", std::to_string(a.scale_attn_by_inverse_layer_idx),
      std::to_string(b.scale_attn_by_inverse_layer_idx));
  cmp("n_experts", std::to_string(a.n_experts), std::to_string(b.n_experts));
  cmp("top_k", std::to_string(a.top_k), std::to_string(b.top_k));
  cmp("expert_width", std::to_string(a.expert_width()), std::to_string(b.expert_width()));
  cmp("n_shared_experts", std::to_string(a.n_shared_experts), std::to_string(b.n_shared_experts));
  cmp("moe_shared_gate", std::to_string(a.moe_shared_gate), std::to_string(b.moe_shared_gate));
  cmp("moe_every", std::to_string(a.moe_every), std::to_string(b.moe_every));
  cmp("moe_first_dense", std::to_string(a.moe_first_dense), std::to_string(b.moe_first_dense));
  cmp("moe_norm_topk", std::to_string(a.moe_norm_topk), std::to_string(b.moe_norm_topk));
  cmp("moe_sigmoid", std::to_string(a.moe_sigmoid), std::to_string(b.moe_sigmoid));
  cmp("moe_expert_bias", std::to_string(a.moe_expert_bias), std::to_string(b.moe_expert_bias));
  cmp("moe_route_scale", shortest_text(a.moe_route_scale), shortest_text(b.moe_route_scale));
  cmp("moe_groups", std::to_string(a.moe_groups), std::to_string(b.moe_groups));
  cmp("moe_group_topk", std::to_string(a.moe_group_topk), std::to_string(b.moe_group_topk));
  cmp("sliding_window", std::to_string(a.sliding_window), std::to_string(b.sliding_window));
  return diff;
}

}  // namespace mpitrain
