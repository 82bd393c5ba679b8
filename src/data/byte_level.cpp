// The byte alphabet of byte-level BPE and its merge loop.
#include "byte_level.hpp"

namespace mpitrain {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

ByteAlphabet::ByteAlphabet() {
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    code_point[b] = printable ? b : next++;
  }
  byte_of.fill(-1);
  for (int b = 0; b < 256; ++b) byte_of[code_point[b]] = b;
}

bool ByteAlphabet::bytes_of(std::string_view token, std::string& bytes) const {
  bytes.clear();
  for (size_t i = 0; i < token.size();) {
    const auto c = static_cast<unsigned char>(token[i]);
    uint32_t cp = c;
    size_t len = 1;
    if (c >= 0xC0 && c < 0xE0 && i + 1 < token.size()) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F);
      len = 2;
    }
    if (cp >= byte_of.size() || byte_of[cp] < 0) return false;
    bytes += static_cast<char>(byte_of[cp]);
    i += len;
  }
  return true;
}

std::string ByteAlphabet::token_of(std::string_view bytes) const {
  std::string token;
  for (char c : bytes) token += utf8(code_point[static_cast<unsigned char>(c)]);
  return token;
}

void BpeMerges::add(uint32_t left, uint32_t right, uint32_t merged) {
  merges_.insert_or_assign(pair_key(left, right), Merge{next_rank_++, merged});
}

void BpeMerges::apply(std::vector<uint32_t>& word) const {
  std::vector<uint32_t> merged;
  while (word.size() > 1) {
    const Merge* best = nullptr;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      const auto m = merges_.find(pair_key(word[i], word[i + 1]));
      if (m != merges_.end() && (!best || m->second.rank < best->rank)) best = &m->second;
    }
    if (!best) break;
    merged.clear();
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size()) {
        const auto m = merges_.find(pair_key(word[i], word[i + 1]));
        if (m != merges_.end() && &m->second == best) {
          merged.push_back(best->id);
          ++i;
          continue;
        }
      }
      merged.push_back(word[i]);
    }
    word.swap(merged);
  }
}

}  // namespace mpitrain
