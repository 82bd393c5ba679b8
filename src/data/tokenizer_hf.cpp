// Hugging Face tokenizer.json: encoding (added tokens, normalizer, pre-tokenizer, byte-level BPE)
// and decoding, on the HfModel that tokenizer_hf_json.cpp reads.
#include <fstream>
#include <nlohmann/json.hpp>

#include "hf_tokenizer_model.hpp"
#include "mpitrain/data/hf_tokenizer.hpp"
#include "unicode_nfc.hpp"

namespace mpitrain {

bool AddedTokens::empty() const {
  return std::all_of(by_first_byte.begin(), by_first_byte.end(),
                     [](const auto& tokens) { return tokens.empty(); });
}

void AddedTokens::add(Token token) {
  auto& tokens = by_first_byte[static_cast<unsigned char>(token.content[0])];
  tokens.push_back(std::move(token));
  std::stable_sort(tokens.begin(), tokens.end(), [](const Token& a, const Token& b) {
    return a.content.size() > b.content.size();
  });
}

bool AddedTokens::find(std::string_view text, size_t from, size_t& at, const Token*& token) const {
  for (size_t i = from; i < text.size(); ++i)
    for (const Token& t : by_first_byte[static_cast<unsigned char>(text[i])])
      if (text.compare(i, t.content.size(), t.content) == 0) {
        at = i;
        token = &t;
        return true;
      }
  return false;
}

namespace {

size_t utf8_length(unsigned char lead) {
  return lead < 0xC0 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

// Whether the UTF-8 character text[i, i + n) is Unicode White_Space (Rust's char::is_whitespace,
// which the tokenizers library strips with): TAB..CR, space, NEL, NBSP, Ogham space mark,
// U+2000..U+200A, line and paragraph separators, narrow NBSP, medium math space, ideographic space.
bool white_space(std::string_view text, size_t i, size_t n) {
  const auto byte = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(text[i + k])); };
  uint32_t c = n == 1 ? byte(0) : n == 2 ? byte(0) & 0x1F : n == 3 ? byte(0) & 0x0F : byte(0) & 0x07;
  for (size_t k = 1; k < n; ++k) c = (c << 6) | (byte(k) & 0x3F);
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The end of the white space that starts text[from, to) / the start of the one that ends it.
size_t skip_white_space(std::string_view text, size_t from, size_t to) {
  for (size_t n; from < to && white_space(text, from, n = std::min(utf8_length(text[from]), to - from));)
    from += n;
  return from;
}
size_t back_over_white_space(std::string_view text, size_t from, size_t to) {
  while (to > from) {
    size_t start = to - 1;
    while (start > from && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!white_space(text, start, to - start)) break;
    to = start;
  }
  return to;
}

// Calls on_text(piece) for the text between added tokens and on_token(id) for each token, in
// order; a token with lstrip / rstrip takes the white space between it and the text before /
// after it along (none of it reaches on_text).
template <class OnText, class OnToken>
void split_added(const AddedTokens& added, std::string_view text, OnText on_text,
                 OnToken on_token) {
  size_t pos = 0, at = 0;
  const AddedTokens::Token* token = nullptr;
  if (!added.empty())
    while (added.find(text, pos, at, token)) {
      const size_t text_end = token->lstrip ? back_over_white_space(text, pos, at) : at;
      if (text_end > pos) on_text(text.substr(pos, text_end - pos));
      on_token(token->id);
      pos = at + token->content.size();
      if (token->rstrip) pos = skip_white_space(text, pos, text.size());
    }
  if (pos < text.size()) on_text(text.substr(pos));
}

// piece split by regex: its matches and the gaps between them, (begin, end, is_match), in order.
struct Segment {
  size_t begin, end;
  bool match;
};
std::vector<Segment> segments(Pcre2Regex::Matcher& matcher, std::string_view piece) {
  std::vector<Segment> out;
  size_t pos = 0, start = 0, end = 0;
  while (pos < piece.size() && matcher.next(piece, pos, start, end)) {
    if (start > pos) out.push_back({pos, start, false});
    out.push_back({start, end, true});
    // An empty match moves on by one character.
    pos = end > start ? end : std::min(piece.size(), end + utf8_length(piece[end]));
    if (end == start && pos > end) out.push_back({end, pos, false});
  }
  if (pos < piece.size()) out.push_back({pos, piece.size(), false});
  return out;
}

// Hugging Face's SplitDelimiterBehavior on the segments (pre_tokenizers/split.rs).
std::vector<Segment> apply_behavior(std::vector<Segment> segs, PreTokenizerStep::Behavior b) {
  using B = PreTokenizerStep::Behavior;
  std::vector<Segment> out;
  if (b == B::Isolated) return segs;
  if (b == B::Removed) {
    for (const Segment& s : segs)
      if (!s.match) out.push_back(s);
    return out;
  }
  if (b == B::MergedWithNext) std::reverse(segs.begin(), segs.end());
  bool previous_match = false;
  for (const Segment& s : segs) {
    const bool joins = b == B::Contiguous ? s.match == previous_match : s.match && !previous_match;
    if (joins && !out.empty()) {
      if (b == B::MergedWithNext)
        out.back().begin = s.begin;
      else
        out.back().end = s.end;
    } else {
      out.push_back({s.begin, s.end, false});
    }
    previous_match = s.match;
  }
  if (b == B::MergedWithNext) std::reverse(out.begin(), out.end());
  return out;
}

// Reads JSON until the top level's first key "model" or "name" (which a descriptor has, and a
// tokenizer.json not): those come before the vocabulary, so the rest is never parsed.
struct TopLevelKey : nlohmann::json_sax<nlohmann::json> {
  std::string found;
  int depth = 0;
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return ++depth, true; }
  bool end_object() override { return --depth, true; }
  bool start_array(std::size_t) override { return ++depth, true; }
  bool end_array() override { return --depth, true; }
  bool key(string_t& key) override {
    if (depth == 1 && (key == "model" || key == "name")) found = key;
    return found.empty();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }
};

}  // namespace

HfTokenizer::HfTokenizer(std::unique_ptr<const HfModel> model) : m_(std::move(model)) {}
HfTokenizer::~HfTokenizer() = default;

std::unique_ptr<HfTokenizer> HfTokenizer::from_files(const std::string& tokenizer_json,
                                                     const std::string& config_json,
                                                     const std::string& chat_template) {
  std::unique_ptr<HfModel> m = read_hf_model(tokenizer_json, config_json);
  if (!chat_template.empty())
    m->files.push_back({"chat_template", chat_template, kChatTemplateFile});
  return std::unique_ptr<HfTokenizer>(new HfTokenizer(std::move(m)));
}

bool HfTokenizer::is_hf_tokenizer_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TopLevelKey sax;
  nlohmann::json::sax_parse(in, &sax);
  return sax.found == "model";
}

int64_t HfTokenizer::vocab_size() const { return m_->vocab_size; }

std::vector<uint32_t> HfTokenizer::encode(std::string_view text) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3);
  std::unordered_map<std::string, std::vector<uint32_t>> cache;  // piece -> ids, this call
  std::vector<std::unique_ptr<Pcre2Regex::Matcher>> matchers;
  for (const PreTokenizerStep& step : m_->pre_tokenizer)
    matchers.push_back(step.regex ? std::make_unique<Pcre2Regex::Matcher>(*step.regex) : nullptr);

  const auto bpe = [&](const std::string& piece) {
    if (piece.empty()) return;
    auto hit = cache.find(piece);
    if (hit == cache.end()) {
      std::vector<uint32_t> word;
      const auto whole = m_->ignore_merges ? m_->vocab.find(m_->alphabet.token_of(piece))
                                           : m_->vocab.end();
      if (whole != m_->vocab.end()) {
        word.push_back(whole->second);
      } else {
        for (char c : piece) word.push_back(m_->byte_ids[static_cast<unsigned char>(c)]);
        m_->merges.apply(word);
      }
      hit = cache.emplace(piece, std::move(word)).first;
    }
    ids.insert(ids.end(), hit->second.begin(), hit->second.end());
  };
  const auto pre_tokenize = [&](std::string_view normalized) {
    std::vector<std::string> pieces{std::string(normalized)}, next;
    for (size_t k = 0; k < m_->pre_tokenizer.size(); ++k) {
      next.clear();
      for (std::string& piece : pieces) {
        if (!matchers[k]) {  // ByteLevel's prefix space
          next.push_back(piece.starts_with(' ') ? std::move(piece) : " " + piece);
          continue;
        }
        std::vector<Segment> segs = segments(*matchers[k], piece);
        if (m_->pre_tokenizer[k].invert)  // the matches are the pieces, the rest delimiters
          for (Segment& s : segs) s.match = !s.match;
        for (const Segment& s : apply_behavior(std::move(segs), m_->pre_tokenizer[k].behavior))
          if (s.end > s.begin) next.push_back(piece.substr(s.begin, s.end - s.begin));
      }
      pieces.swap(next);
    }
    for (const std::string& piece : pieces) bpe(piece);
  };
  const auto push = [&](uint32_t id) { ids.push_back(id); };
  split_added(m_->raw_added, text, [&](std::string_view raw) {
    if (!m_->nfc) return pre_tokenize(raw);
    split_added(m_->normalized_added, nfc(raw), pre_tokenize, push);
  }, push);
  return ids;
}

std::string HfTokenizer::decode(const int32_t* ids, size_t n) const {
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < m_->vocab_size && m_->known[ids[i]])
      text += m_->decoded[ids[i]];
    else
      text += "<|" + std::to_string(ids[i]) + "|>";
  }
  return text;
}

std::optional<uint32_t> HfTokenizer::document_start() const { return m_->document_start; }
std::optional<uint32_t> HfTokenizer::document_end() const { return m_->document_end; }
std::vector<TokenizerFile> HfTokenizer::files() const { return m_->files; }

}  // namespace mpitrain
