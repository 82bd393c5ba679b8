// The byte tokenizer: one token per byte.
#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

std::vector<uint32_t> ByteTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

std::string ByteTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string text;
  text.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < kVocabSize)
      text += static_cast<char>(ids[i]);
    else
      text += "<|" + std::to_string(ids[i]) + "|>";
  }
  return text;
}

}  // namespace mpitrain
