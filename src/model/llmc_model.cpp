#include "mpitrain/model/llmc_model.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <vector>

#include "mpitrain/io/out_file.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/tensor/bf16.hpp"

namespace mpitrain {

namespace {

static_assert(std::endian::native == std::endian::little, "llm.c model files are little-endian");

constexpr int32_t kMagic = 20240326;
constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);
constexpr float kNormEps = 1e-5f;                   // llm.c's LayerNorm eps, not in the header
constexpr int32_t kMaxField = int32_t{1} << 28;     // header fields above this are corrupt
constexpr size_t kChunk = size_t{1} << 20;          // elements per bf16 conversion buffer

size_t element_bytes(LlmcDtype dtype) { return dtype == LlmcDtype::Fp32 ? 4 : 2; }

// Vp*C + maxT*C + L*(12C^2 + 13C) + 2C, in 128 bits: a corrupt header cannot overflow it.
unsigned __int128 param_count(int64_t Vp, int64_t maxT, int64_t L, int64_t C) {
  using u128 = unsigned __int128;
  return u128(Vp) * C + u128(maxT) * C + u128(L) * (12 * u128(C) * C + 13 * u128(C)) + 2 * u128(C);
}

// Our tensors in llm.c's file order. Slot lists gpt2's tensors in llm.c's order and the layout
// lists each slot's layers in order, so a stable sort by slot turns our per-layer grouping into
// llm.c's stacked (L, ...) tensors.
std::vector<const ParamTensor*> file_order(const ParamLayout& layout) {
  std::vector<const ParamTensor*> order;
  for (const auto& t : layout.tensors()) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(),
                   [](const ParamTensor* a, const ParamTensor* b) { return a->slot < b->slot; });
  return order;
}

void check_layout(const ModelConfig& config, const ParamLayout& layout) {
  if (param_count(config.padded_vocab(), config.max_seq_len, config.n_layer, config.d_model) !=
      layout.total())
    MPITRAIN_THROW("parameter layout (" + std::to_string(layout.total()) +
                   " floats) does not belong to a gpt2 config");
}

struct Header {
  ModelConfig config;
  LlmcDtype dtype;
};

std::ifstream open_model(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw UsageError(path + (std::filesystem::exists(path, ec) ? ": not a regular file"
                                                               : ": no such llm.c model file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(path + ": cannot open: " + std::strerror(errno));
  return in;
}

Header read_header(std::ifstream& in, const std::string& path) {
  std::array<int32_t, kHeaderInts> h{};
  in.read(reinterpret_cast<char*>(h.data()), kHeaderBytes);
  if (!in) throw UsageError(path + ": too short for an llm.c model file (no 1024-byte header)");
  if (h[0] != kMagic)
    throw UsageError(path + ": not an llm.c model file (magic " + std::to_string(h[0]) +
                     ", expected " + std::to_string(kMagic) + ")");
  if (h[1] != static_cast<int32_t>(LlmcDtype::Fp32) &&
      h[1] != static_cast<int32_t>(LlmcDtype::Bf16))
    throw UsageError(path + ": unsupported llm.c model version " + std::to_string(h[1]) +
                     " (3 = fp32 and 5 = bf16 are supported)");
  const std::array<const char*, 6> names = {"maxT", "V", "L", "NH", "C", "Vp"};
  for (size_t i = 0; i < names.size(); ++i)
    if (h[2 + i] < 1 || h[2 + i] > kMaxField)
      throw UsageError(path + ": corrupt llm.c header: " + names[i] + " = " +
                       std::to_string(h[2 + i]));

  Header out{ModelConfig{}, static_cast<LlmcDtype>(h[1])};
  ModelConfig& c = out.config;
  c.arch = Arch::Gpt2;
  c.max_seq_len = h[2];
  c.vocab_size = h[3];
  c.n_layer = h[4];
  c.n_head = c.n_kv_head = h[5];
  c.d_model = h[6];
  c.d_ff = 4 * c.d_model;
  c.norm_eps = kNormEps;
  if (h[7] != c.padded_vocab())
    throw UsageError(path + ": llm.c header has Vp = " + std::to_string(h[7]) + " for V = " +
                     std::to_string(c.vocab_size) + "; mpitrain pads the vocabulary to " +
                     std::to_string(c.padded_vocab()) + " (a multiple of 128)");
  try {
    c.validate();
  } catch (const UsageError& e) {
    throw UsageError(path + ": llm.c header describes an invalid model: " + e.what());
  }

  std::error_code ec;
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw UsageError(path + ": cannot read the file size: " + ec.message());
  const unsigned __int128 expected =
      kHeaderBytes + param_count(h[7], h[2], h[4], h[6]) * element_bytes(out.dtype);
  if (size != expected)
    throw UsageError(
        path + ": file size " + std::to_string(size) + " bytes does not match its llm.c header " +
        "(expected " +
        (expected > std::numeric_limits<uintmax_t>::max()
             ? std::string("more than 2^64")
             : std::to_string(static_cast<uintmax_t>(expected))) +
        "; truncated, or not the model the header describes)");
  return out;
}

std::string show(const auto& value) {
  std::ostringstream s;
  s << value;
  return s.str();
}

void check_same(const std::string& path, const ModelConfig& file, const ModelConfig& want) {
  auto same = [&](const char* field, const auto& in_file, const auto& in_model) {
    if (in_file != in_model)
      throw UsageError(path + ": " + field + " is " + show(in_file) + " in the llm.c file but " +
                       show(in_model) + " in the model config");
  };
  same("arch", to_string(file.arch), to_string(want.arch));
  same("n-layer", file.n_layer, want.n_layer);
  same("n-head", file.n_head, want.n_head);
  same("n-kv-head", file.n_kv_head, want.n_kv_head);
  same("d-model", file.d_model, want.d_model);
  same("d-ff", file.d_ff, want.d_ff);
  same("vocab-size", file.vocab_size, want.vocab_size);
  same("seq-len", file.max_seq_len, want.max_seq_len);
  same("norm-eps", file.norm_eps, want.norm_eps);
}

}  // namespace

ModelConfig read_llmc_config(const std::string& path) {
  std::ifstream in = open_model(path);
  return read_header(in, path).config;
}

void load_llmc_model(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                     float* params) {
  std::ifstream in = open_model(path);
  const Header header = read_header(in, path);
  check_same(path, header.config, config);
  check_layout(config, layout);

  auto read = [&](void* dst, size_t bytes) {
    in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
    if (!in) throw UsageError(path + ": read failed (file truncated while loading?)");
  };
  std::vector<bf16_bits> buf(header.dtype == LlmcDtype::Bf16 ? std::min(kChunk, layout.total())
                                                              : 0);
  for (const ParamTensor* t : file_order(layout)) {
    float* dst = params + t->offset;
    if (header.dtype == LlmcDtype::Fp32) {
      read(dst, t->numel * sizeof(float));
      continue;
    }
    for (size_t i = 0; i < t->numel; i += buf.size()) {
      const size_t n = std::min(buf.size(), t->numel - i);
      read(buf.data(), n * sizeof(bf16_bits));
      std::transform(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n), dst + i,
                     bf16_to_float);
    }
  }
}

void require_llmc_expressible(const std::string& path, const ModelConfig& config) {
  require(config.arch == Arch::Gpt2,
          path + ": llm.c's model format holds gpt2 models only, not " + to_string(config.arch));
  require(config.tie_embeddings,
          path +
              ": llm.c's model format ties the head to wte: tie-embeddings false cannot be "
              "written");
  require(config.d_ff == 4 * config.d_model,
          path + ": llm.c's model format needs d-ff = 4 x d-model (" +
              std::to_string(4 * config.d_model) + "), got " + std::to_string(config.d_ff));
  require(config.norm_eps == kNormEps,
          path + ": llm.c's models use norm-eps 1e-05, got " + show(config.norm_eps));
  require(config.scale_attn_weights && !config.scale_attn_by_inverse_layer_idx,
          path + ": llm.c's gpt2 scales attention by 1/sqrt(head size) only: "
                 "gpt2-scale-attn-weights false / gpt2-scale-attn-by-layer cannot be written");
}

void save_llmc_model(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                     const float* params, LlmcDtype dtype) {
  require_llmc_expressible(path, config);
  check_layout(config, layout);

  std::array<int32_t, kHeaderInts> h{};
  h[0] = kMagic;
  h[1] = static_cast<int32_t>(dtype);
  h[2] = config.max_seq_len;
  h[3] = config.vocab_size;
  h[4] = config.n_layer;
  h[5] = config.n_head;
  h[6] = config.d_model;
  h[7] = config.padded_vocab();

  OutFile out(path + ".tmp");
  out.write(h.data(), kHeaderBytes);
  std::vector<bf16_bits> buf(dtype == LlmcDtype::Bf16 ? std::min(kChunk, layout.total()) : 0);
  for (const ParamTensor* t : file_order(layout)) {
    const float* src = params + t->offset;
    if (dtype == LlmcDtype::Fp32) {
      out.write(src, t->numel * sizeof(float));
      continue;
    }
    for (size_t i = 0; i < t->numel; i += buf.size()) {
      const size_t n = std::min(buf.size(), t->numel - i);
      std::transform(src + i, src + i + n, buf.begin(), float_to_bf16);
      out.write(buf.data(), n * sizeof(bf16_bits));
    }
  }
  out.commit(path);
}

}  // namespace mpitrain
