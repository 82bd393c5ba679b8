// The byte-level tokenizer: one token per byte, vocabulary 256, name "bytes".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpitrain {

class ByteTokenizer {
 public:
  static constexpr int64_t kVocabSize = 256;
  static constexpr const char* kName = "bytes";

  std::vector<uint32_t> encode(std::string_view text) const;  // byte b -> id b
  // Ids back to bytes; an id outside [0, 256) is rendered as "<|id|>".
  std::string decode(const int32_t* ids, size_t n) const;
};

}  // namespace mpitrain
