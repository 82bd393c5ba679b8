// Private to src/data: a Hugging Face tokenizer.json as HfTokenizer runs it (hf_tokenizer.hpp),
// read and checked by read_hf_model (tokenizer_hf_json.cpp).
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "byte_level.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "pcre2_regex.hpp"

namespace mpitrain {

// Added tokens matched in text, longest first at the leftmost place.
struct AddedTokens {
  struct Token {
    std::string content;
    uint32_t id;
    bool lstrip = false, rstrip = false;  // takes the white space before / after it along
  };
  std::array<std::vector<Token>, 256> by_first_byte;  // each longest first
  bool empty() const;
  void add(Token token);
  // The first token in text at or after from: true with its place and token, else false.
  bool find(std::string_view text, size_t from, size_t& at, const Token*& token) const;
};

// One step of the pre-tokenizer: a Split by a regex, or ByteLevel's prefix space.
struct PreTokenizerStep {
  enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
  std::unique_ptr<Pcre2Regex> regex;  // null: add a space before a piece that has none first
  Behavior behavior = Behavior::Isolated;
  bool invert = false;  // the regex matches the pieces, not the delimiters (with Removed only)
};

struct HfModel {
  int64_t vocab_size = 0;
  std::vector<std::string> decoded;     // id -> bytes
  std::vector<bool> known;              // id -> whether it is a token
  std::array<uint32_t, 256> byte_ids{}; // byte -> its token
  std::unordered_map<std::string, uint32_t> vocab;  // byte-alphabet token -> id (ignore_merges)
  BpeMerges merges;
  bool ignore_merges = false;
  bool nfc = false;
  AddedTokens raw_added;         // matched before normalization (normalized: false)
  AddedTokens normalized_added;  // matched after it (normalized: true)
  std::vector<PreTokenizerStep> pre_tokenizer;
  ByteAlphabet alphabet;
  std::optional<uint32_t> document_start, document_end;
  std::vector<TokenizerFile> files;
};

// tokenizer_json (and config_json unless "") read and checked: UsageError naming the file and
// field for anything malformed or that HfTokenizer does not do.
std::unique_ptr<HfModel> read_hf_model(const std::string& tokenizer_json,
                                       const std::string& config_json);

}  // namespace mpitrain
