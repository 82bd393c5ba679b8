#include "mpitrain/parallel/compression.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "mpitrain/backend/precision.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

uint16_t load16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

void store16(std::byte* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

float half_value(GradCompress c, uint16_t bits) {
  return c == GradCompress::Bf16 ? from_bf16_bits(bits) : from_fp16_bits(bits);
}

uint16_t half_bits(GradCompress c, float x) {
  return c == GradCompress::Bf16 ? to_bf16_bits(x) : to_fp16_bits(x);
}

// |x| for ordering, NaN above everything.
float magnitude(float x) {
  const float a = std::fabs(x);
  return std::isnan(a) ? std::numeric_limits<float>::infinity() : a;
}

size_t int8_groups(size_t count) { return (count + kInt8Group - 1) / kInt8Group; }

// int8 block of count values: the scale of each group, then the values.
float int8_scale(const std::byte* in, size_t group) {
  float s;
  std::memcpy(&s, in + group * sizeof(float), sizeof s);
  return s;
}

// One group x(m) into its scale and q(m); dropped as in encode_block.
void encode_int8_group(const float* x, size_t m, std::byte* scale, int8_t* q, float* dropped) {
  float max = 0.0f;
  for (size_t i = 0; i < m; ++i) max = std::max(max, magnitude(x[i]));
  // s = max / 127; a non-finite group decodes to NaN (q = 0 times a NaN scale).
  const bool finite = std::isfinite(max);
  const float s = finite ? max / 127.0f : std::numeric_limits<float>::quiet_NaN();
  const float inv = finite && max > 0 ? 127.0f / max : 0.0f;
  std::memcpy(scale, &s, sizeof s);
  for (size_t i = 0; i < m; ++i) {
    const float r = std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f);
    q[i] = static_cast<int8_t>(finite ? r : 0.0f);
    if (dropped) dropped[i] = finite ? x[i] - static_cast<float>(q[i]) * s : 0.0f;
  }
}

template <typename Put>
void decode(GradCompress c, const std::byte* in, size_t m, size_t count, Put put) {
  switch (c) {
    case GradCompress::None:
      for (size_t i = 0; i < m; ++i) {
        float v;
        std::memcpy(&v, in + i * sizeof(float), sizeof v);
        put(i, v);
      }
      return;
    case GradCompress::Bf16:
    case GradCompress::Fp16:
      for (size_t i = 0; i < m; ++i) put(i, half_value(c, load16(in + 2 * i)));
      return;
    case GradCompress::Int8: {
      const auto* q = reinterpret_cast<const int8_t*>(in + int8_groups(count) * sizeof(float));
      for (size_t g = 0; g * kInt8Group < m; ++g) {
        const float s = int8_scale(in, g);
        for (size_t i = g * kInt8Group; i < std::min(m, (g + 1) * kInt8Group); ++i)
          put(i, static_cast<float>(q[i]) * s);
      }
      return;
    }
    case GradCompress::TopK: break;
  }
  MPITRAIN_THROW("decode_block: topk has no blocks");
}

}  // namespace

GradCompress parse_grad_compress(const std::string& name) {
  if (name == "none") return GradCompress::None;
  if (name == "bf16") return GradCompress::Bf16;
  if (name == "fp16") return GradCompress::Fp16;
  if (name == "int8") return GradCompress::Int8;
  if (name == "topk") return GradCompress::TopK;
  throw UsageError("grad-compress '" + name + "' is not one of none, bf16, fp16, int8, topk");
}

std::string to_string(GradCompress c) {
  switch (c) {
    case GradCompress::None: return "none";
    case GradCompress::Bf16: return "bf16";
    case GradCompress::Fp16: return "fp16";
    case GradCompress::Int8: return "int8";
    case GradCompress::TopK: return "topk";
  }
  return "?";
}

size_t block_bytes(GradCompress c, size_t count) {
  switch (c) {
    case GradCompress::None: return count * sizeof(float);
    case GradCompress::Bf16:
    case GradCompress::Fp16: return count * sizeof(uint16_t);
    case GradCompress::Int8: return int8_groups(count) * sizeof(float) + count;
    case GradCompress::TopK: break;
  }
  MPITRAIN_THROW("block_bytes: topk has no blocks");
}

void encode_block(GradCompress c, const float* x, size_t m, size_t count, std::byte* out,
                  float* dropped) {
  const size_t bytes = block_bytes(c, count);
  switch (c) {
    case GradCompress::None:
      std::memcpy(out, x, m * sizeof(float));
      if (dropped) std::fill(dropped, dropped + m, 0.0f);
      break;
    case GradCompress::Bf16:
    case GradCompress::Fp16:
      for (size_t i = 0; i < m; ++i) {
        const uint16_t b = half_bits(c, x[i]);
        store16(out + 2 * i, b);
        if (dropped) {
          const float d = x[i] - half_value(c, b);
          dropped[i] = std::isfinite(d) ? d : 0.0f;
        }
      }
      break;
    case GradCompress::Int8: {
      std::memset(out, 0, bytes);  // padding: scale 0, q 0
      const size_t groups = int8_groups(count);
      auto* q = reinterpret_cast<int8_t*>(out + groups * sizeof(float));
      for (size_t g = 0; g * kInt8Group < m; ++g) {
        const size_t from = g * kInt8Group, len = std::min(kInt8Group, m - from);
        encode_int8_group(x + from, len, out + g * sizeof(float), q + from,
                          dropped ? dropped + from : nullptr);
      }
      return;
    }
    case GradCompress::TopK: MPITRAIN_THROW("encode_block: topk has no blocks");
  }
  const size_t used = c == GradCompress::None ? m * sizeof(float) : m * sizeof(uint16_t);
  std::memset(out + used, 0, bytes - used);
}

void decode_block(GradCompress c, const std::byte* in, size_t m, size_t count, float* x) {
  decode(c, in, m, count, [x](size_t i, float v) { x[i] = v; });
}

void decode_add_block(GradCompress c, const std::byte* in, size_t m, size_t count, float* acc) {
  decode(c, in, m, count, [acc](size_t i, float v) { acc[i] += v; });
}

size_t topk_count(size_t len, double ratio) {
  const double k = std::nearbyint(ratio * static_cast<double>(len));
  return std::clamp<size_t>(static_cast<size_t>(std::max(k, 1.0)), 1, len);
}

void take_topk(float* x, size_t len, size_t k, uint32_t* scratch, TopkPair* out) {
  for (size_t i = 0; i < len; ++i) scratch[i] = static_cast<uint32_t>(i);
  const auto larger = [x](uint32_t a, uint32_t b) {
    const float ma = magnitude(x[a]), mb = magnitude(x[b]);
    return ma > mb || (ma == mb && a < b);
  };
  std::nth_element(scratch, scratch + k - 1, scratch + len, larger);
  std::sort(scratch, scratch + k);
  for (size_t j = 0; j < k; ++j) {
    out[j] = {scratch[j], x[scratch[j]]};
    x[scratch[j]] = 0.0f;
  }
  for (size_t i = 0; i < len; ++i)
    if (!std::isfinite(x[i])) x[i] = 0.0f;
}

}  // namespace mpitrain
