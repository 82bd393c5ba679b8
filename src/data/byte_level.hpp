// Private to src/data: what byte-level BPE tokenizers share (GPT-2's encoder.json + vocab.bpe and
// Hugging Face tokenizer.json): the byte alphabet of encoder.py's bytes_to_unicode, and the merge
// loop over token ids.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace mpitrain {

// GPT-2's pre-tokenizer pattern (OpenAI's encoder.py; Hugging Face's ByteLevel use_regex).
inline constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The UTF-8 encoding of code point cp (< 0x10000).
std::string utf8(uint32_t cp);

// The byte alphabet: the printable bytes stand for themselves, the others for 256, 257, ... in
// byte order. The code point of byte b is [b]; the byte of code point c (-1: none) is byte_of[c].
struct ByteAlphabet {
  std::array<uint32_t, 256> code_point{};
  std::array<int, 512> byte_of{};
  ByteAlphabet();
  // A token (code points of the alphabet, UTF-8) back to its bytes; false if a code point stands
  // for no byte.
  bool bytes_of(std::string_view token, std::string& bytes) const;
  // Bytes to the alphabet's code points, UTF-8.
  std::string token_of(std::string_view bytes) const;
};

// The merges of a BPE: pair (left id, right id) -> (rank, merged id).
class BpeMerges {
 public:
  // A later merge of the same pair replaces an earlier one (as encoder.py's and Hugging Face's
  // dictionaries do).
  void add(uint32_t left, uint32_t right, uint32_t merged);
  void reserve(size_t n) { merges_.reserve(n); }
  size_t size() const { return merges_.size(); }
  // Merges the adjacent pair of lowest rank, everywhere it occurs, until no pair has a rank.
  void apply(std::vector<uint32_t>& word) const;

 private:
  struct Merge {
    uint32_t rank;
    uint32_t id;  // the merged token
  };
  static uint64_t pair_key(uint32_t left, uint32_t right) {
    return static_cast<uint64_t>(left) << 32 | right;
  }
  std::unordered_map<uint64_t, Merge> merges_;
  uint32_t next_rank_ = 0;
};

}  // namespace mpitrain
