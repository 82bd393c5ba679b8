// Compressed formats for the data-parallel gradient sync (--grad-compress).
//
// A block holds `count` floats (the piece of a bucket bound for one rank) in block_bytes(count):
//   none       4 bytes per value, the floats themselves;
//   bf16/fp16  2 bytes per value, rounded to nearest even (backend/precision.hpp);
//   int8       per group of kInt8Group values a float scale s = max|x| / 127 over the group, then
//              q_i = round(x_i / s) in [-127, 127], 1 byte each: x_i ~ q_i s, off by at most s / 2
//              (a non-finite x makes its group NaN). The scales come first, then the values:
//              4 ceil(count / 512) + count bytes. Groups keep one large gradient from flattening
//              the small ones of a whole chunk (a dp-th of a 25 MiB bucket) to 0.
// A block given m < count values (the tail of a bucket) is padded with zero bytes, which decode
// to 0. topk travels as (index, value) pairs instead (take_topk).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace mpitrain {

enum class GradCompress { None, Bf16, Fp16, Int8, TopK };

inline constexpr size_t kInt8Group = 512;  // int8: values per scale

// "none" | "bf16" | "fp16" | "int8" | "topk", else UsageError.
GradCompress parse_grad_compress(const std::string& name);
std::string to_string(GradCompress c);

size_t block_bytes(GradCompress c, size_t count);  // not for TopK

// Encodes x(m), m <= count, into out(block_bytes(count)). With dropped, dropped[i] = x[i] -
// decoded[i] (what the format lost; dropped may be x itself), but 0 where that is not finite:
// a step with non-finite gradients is skipped, and its residual would poison every later one.
void encode_block(GradCompress c, const float* x, size_t m, size_t count, std::byte* out,
                  float* dropped);
// The first m values of a block of count: written into x, or added to acc (a sum in fp32).
void decode_block(GradCompress c, const std::byte* in, size_t m, size_t count, float* x);
void decode_add_block(GradCompress c, const std::byte* in, size_t m, size_t count, float* acc);

struct TopkPair {
  uint32_t index;  // within the bucket
  float value;
};

// k = ratio * len rounded to nearest, at least 1 and at most len (len > 0).
size_t topk_count(size_t len, double ratio);
// The k values of x(len) largest in magnitude (NaN counts as largest; ties: lower index) into
// out(k) in ascending index order, and set to 0 in x, which then holds what was dropped (non-finite
// values left there set to 0 too, as in encode_block). scratch(len) is working space.
void take_topk(float* x, size_t len, size_t k, uint32_t* scratch, TopkPair* out);

}  // namespace mpitrain
