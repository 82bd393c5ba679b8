// Names, checksum and manifest of the checkpoint format.
#include "mpitrain/ckpt/format.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>

#include "ckpt_io.hpp"
#include "mpitrain/io/hdf5.hpp"

namespace mpitrain {

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> parse_step_dir(const std::string& name) {
  const std::string prefix = "step-";
  const size_t digits = name.size() - prefix.size();
  if (name.size() <= prefix.size() || digits > 18 || name.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string hex_text(uint64_t x) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, x);
  return buf;
}

std::string dataset_path(const std::string& group, const std::string& tensor) {
  return "/" + group + "/" + tensor;
}

std::vector<std::string> checkpoint_groups(OptimizerKind optimizer) {
  std::vector<std::string> groups = {kParamsGroup};
  for (const std::string& name : state_names(optimizer)) groups.push_back(name);
  return groups;
}

// ---- checksum -------------------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t checksum(const float* data, uint64_t first_index, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t k = 0; k < n; ++k)
    sum += splitmix64(((first_index + k) << 32) | std::bit_cast<uint32_t>(data[k]));
  return sum;
}

uint64_t range_checksum(const ParamTensor& t, const float* data, uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  for_each_run(t, [&](uint64_t global, uint64_t local, uint64_t n) {
    const uint64_t begin = std::max(a, local), end = std::min(b, local + n);
    if (begin < end) sum += checksum(data + (begin - a), global + (begin - local), end - begin);
  });
  return sum;
}

// ---- manifest -------------------------------------------------------------------------------

namespace {

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
  f("dp", m.layout.dp, 1);
  f("tp", m.layout.tp, 1);
  f("pp", m.layout.pp, 1);
  f("pp_layers", m.pp_layers, 1);
  f("global_batch_size", m.global_batch_size, 1);
  f("micro_batch_size", m.micro_batch_size, 1);
  f("seq_len", m.seq_len, 1);
  f("build_id", m.build_id, 1);
  f("wall_time", m.wall_time, 1);
}

struct FieldWriter {
  hid_t group;
  void operator()(const char* n, int64_t v, int) const { write_attribute_int(group, n, v); }
  void operator()(const char* n, int v, int) const { write_attribute_int(group, n, v); }
  void operator()(const char* n, uint64_t v, int) const { write_attribute_uint64(group, n, v); }
  void operator()(const char* n, double v, int) const { write_attribute_double(group, n, v); }
  void operator()(const char* n, float v, int) const { write_attribute_double(group, n, v); }
  void operator()(const char* n, const std::string& v, int) const {
    write_attribute_string(group, n, v);
  }
  void operator()(const char* n, Arch v, int) const {
    write_attribute_string(group, n, to_string(v));
  }
  void operator()(const char* n, OptimizerKind v, int) const {
    write_attribute_string(group, n, to_string(v));
  }
};

struct FieldReader {
  hid_t group;
  const int64_t* version;  // the file's format version (its field is read first)
  template <class V>
  void operator()(const char* n, V& v, int since) const {
    if (since > *version) return;  // not in files of this version: the default stands
    if (!has_attribute(group, n))
      throw Error("manifest attribute '" + std::string(n) + "' is missing");
    read(n, v);
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
};

// The shortest text that reads back as v ("1e-05" for the float 1e-5f).
template <class T>
std::string text_of(T v) {
  char buf[40];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? end : buf);
}

struct FieldPrinter {
  std::vector<std::pair<std::string, std::string>>* out;
  void add(const char* n, std::string v) const { out->emplace_back(n, std::move(v)); }
  void operator()(const char* n, int64_t v, int) const { add(n, std::to_string(v)); }
  void operator()(const char* n, int v, int) const { add(n, std::to_string(v)); }
  void operator()(const char* n, uint64_t v, int) const { add(n, std::to_string(v)); }
  void operator()(const char* n, double v, int) const { add(n, text_of(v)); }
  void operator()(const char* n, float v, int) const { add(n, text_of(v)); }
  void operator()(const char* n, const std::string& v, int) const { add(n, v); }
  void operator()(const char* n, Arch v, int) const { add(n, to_string(v)); }
  void operator()(const char* n, OptimizerKind v, int) const { add(n, to_string(v)); }
};

}  // namespace

void write_manifest(hid_t file, const CheckpointManifest& m) {
  H5Handle group(H5_CHECK(H5Gcreate2(file, kManifestGroup, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)));
  for_each_field(m, FieldWriter{group.get()});
}

CheckpointManifest read_manifest(hid_t file) {
  if (!has_link(file, kManifestGroup)) throw Error("the group /manifest is missing");
  H5Handle group(H5_CHECK(H5Gopen2(file, kManifestGroup, H5P_DEFAULT)));
  CheckpointManifest m;
  try {
    for_each_field(m, FieldReader{group.get(), &m.format_version});
  } catch (const Error& e) {  // a wrong attribute type is a UsageError in io/: here it is damage
    throw Error(e.what());
  }
  return m;
}

std::vector<std::pair<std::string, std::string>> manifest_fields(const CheckpointManifest& m) {
  std::vector<std::pair<std::string, std::string>> out;
  for_each_field(m, FieldPrinter{&out});
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
  return diff;
}

}  // namespace mpitrain
