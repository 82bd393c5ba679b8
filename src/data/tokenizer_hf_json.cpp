// Hugging Face tokenizer.json (and tokenizer_config.json) read into an HfModel. Every key is
// either run or refused: a setting this reader does not know is a UsageError naming it.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string_view>

#include "hf_tokenizer_model.hpp"
#include "mpitrain/data/hf_tokenizer.hpp"
#include "mpitrain/io/text_file.hpp"
#include "mpitrain/runtime/error.hpp"

using json = nlohmann::json;

namespace mpitrain {

namespace {

// Checks of one file's fields; every message names the file and the field.
class Fields {
 public:
  explicit Fields(std::string file) : file_(std::move(file)) {}

  void check(bool ok, const std::string& field, const std::string& what) const {
    require(ok, "'" + file_ + "': " + field + " " + what);
  }
  // A value this tokenizer does not run: refused, naming it.
  void refuse_unless(bool ok, const std::string& field, const json& value) const {
    check(ok, field, "= " + value.dump() +
                         " is not supported: refused rather than tokenized differently (this "
                         "reads byte-level BPE tokenizer.json files such as Llama 3's, Qwen's and "
                         "GPT-2's; a SentencePiece-based one goes through its tokenizer.model)");
  }
  void only_keys(const json& obj, const std::string& field,
                 std::initializer_list<std::string_view> keys) const {
    check(obj.is_object(), field, "must be a JSON object");
    for (const auto& [key, value] : obj.items())
      refuse_unless(std::find(keys.begin(), keys.end(), key) != keys.end(), field + "." + key,
                    value);
  }
  std::string type(const json& obj, const std::string& field) const {
    check(obj.is_object() && obj.contains("type") && obj["type"].is_string(), field,
          "must be an object with a string \"type\"");
    return obj["type"].get<std::string>();
  }
  // obj[key] as a bool; fallback when absent.
  bool flag(const json& obj, const std::string& field, const char* key, bool fallback) const {
    if (!obj.contains(key)) return fallback;
    check(obj[key].is_boolean(), field + "." + key, "must be true or false");
    return obj[key].get<bool>();
  }
  uint32_t id(const json& value, const std::string& field) const {
    check(value.is_number_unsigned() && value.get<uint64_t>() < (1u << 31), field,
          "must be a token id in [0, 2^31)");
    return value.get<uint32_t>();
  }
  std::string string(const json& value, const std::string& field) const {
    check(value.is_string() && !value.get<std::string>().empty(), field,
          "must be a non-empty string");
    return value.get<std::string>();
  }

 private:
  std::string file_;
};

json read_json(const std::string& path, const std::string& what) {
  std::ifstream in = open_text_file(path, what);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  require(!j.is_discarded() && j.is_object(), "'" + path + "' is not a JSON object (" + what + ")");
  return j;
}

// A literal string as a PCRE2 pattern.
std::string escaped(const std::string& literal) {
  std::string out;
  for (char c : literal) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

// The id of token (an added token's content or a vocabulary token, raw text); nullopt if none.
std::optional<uint32_t> token_id(const HfModel& m,
                                 const std::unordered_map<std::string, uint32_t>& added,
                                 const std::string& token) {
  if (const auto a = added.find(token); a != added.end()) return a->second;
  if (const auto v = m.vocab.find(m.alphabet.token_of(token)); v != m.vocab.end()) return v->second;
  return std::nullopt;
}

void read_bpe(const Fields& f, const json& model, HfModel& m) {
  f.only_keys(model, "model",
              {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
               "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"});
  f.refuse_unless(f.type(model, "model") == "BPE", "model.type", model["type"]);
  if (model.contains("dropout")) f.refuse_unless(model["dropout"].is_null(), "model.dropout", model["dropout"]);
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(affix))
      f.refuse_unless(model[affix].is_null() || model[affix] == "", std::string("model.") + affix,
                      model[affix]);
  f.refuse_unless(!f.flag(model, "model", "byte_fallback", false), "model.byte_fallback", true);
  // unk_token and fuse_unk change nothing: every byte is a token (checked below).
  m.ignore_merges = f.flag(model, "model", "ignore_merges", false);

  f.check(model.contains("vocab") && model["vocab"].is_object() && !model["vocab"].empty(),
          "model.vocab", "must be a non-empty object {token: id}");
  m.vocab.reserve(model["vocab"].size());
  // (The messages are made only for a field that fails: a vocabulary has 10^5 tokens.)
  for (const auto& [token, id] : model["vocab"].items()) {
    const bool valid = id.is_number_unsigned() && id.get<uint64_t>() < (1u << 31);
    const uint32_t i = valid ? id.get<uint32_t>() : f.id(id, "model.vocab[\"" + token + "\"]");
    m.vocab.emplace(token, i);
    if (i >= m.decoded.size()) {
      m.decoded.resize(i + 1);
      m.known.resize(i + 1);
    }
    if (m.known[i])
      f.check(false, "model.vocab[\"" + token + "\"]", "repeats id " + std::to_string(i));
    m.known[i] = true;
    // The ByteLevel decoder: the alphabet's bytes, or the token's own when it is not in it.
    if (!m.alphabet.bytes_of(token, m.decoded[i])) m.decoded[i] = token;
  }
  for (int b = 0; b < 256; ++b) {
    const auto id = m.vocab.find(utf8(m.alphabet.code_point[b]));
    f.check(id != m.vocab.end(), "model.vocab",
            "lacks the token of byte " + std::to_string(b) + ": not a byte-level BPE");
    m.byte_ids[b] = id->second;
  }

  f.check(model.contains("merges") && model["merges"].is_array(), "model.merges",
          "must be an array of \"left right\" or [left, right]");
  m.merges.reserve(model["merges"].size());
  size_t n = 0;
  std::string left, right;
  for (const json& merge : model["merges"]) {
    const auto bad = [&](const std::string& what) {
      f.check(false, "model.merges[" + std::to_string(n) + "]", "= " + merge.dump() + " " + what);
    };
    if (merge.is_string()) {
      const std::string& s = merge.get_ref<const std::string&>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        bad("is not \"left right\"");
      left.assign(s, 0, space);
      right.assign(s, space + 1);
    } else {
      if (!merge.is_array() || merge.size() != 2 || !merge[0].is_string() || !merge[1].is_string())
        bad("is not \"left right\" or [left, right]");
      left = merge[0].get_ref<const std::string&>();
      right = merge[1].get_ref<const std::string&>();
    }
    const auto l = m.vocab.find(left), r = m.vocab.find(right), lr = m.vocab.find(left + right);
    if (l == m.vocab.end() || r == m.vocab.end() || lr == m.vocab.end())
      bad("merges tokens that model.vocab does not hold");
    m.merges.add(l->second, r->second, lr->second);
    ++n;
  }
}

// Returns the added tokens' contents -> ids.
std::unordered_map<std::string, uint32_t> read_added_tokens(const Fields& f, const json& tokens,
                                                            HfModel& m) {
  std::unordered_map<std::string, uint32_t> added;
  f.check(tokens.is_array(), "added_tokens", "must be an array");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const json& t = tokens[i];
    const std::string field = "added_tokens[" + std::to_string(i) + "]";
    f.only_keys(t, field, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"});
    f.refuse_unless(!f.flag(t, field, "single_word", false), field + ".single_word", true);
    const uint32_t id = f.id(t.value("id", json()), field + ".id");
    const std::string content = f.string(t.value("content", json()), field + ".content");
    const bool special = f.flag(t, field, "special", false);
    const bool normalized = f.flag(t, field, "normalized", !special);
    if (id >= m.decoded.size()) {
      m.decoded.resize(id + 1);
      m.known.resize(id + 1);
    }
    m.known[id] = true;
    if (!m.alphabet.bytes_of(content, m.decoded[id])) m.decoded[id] = content;
    // Without a normalizer the normalized text is the text itself.
    (normalized && m.nfc ? m.normalized_added : m.raw_added)
        .add({content, id, f.flag(t, field, "lstrip", false), f.flag(t, field, "rstrip", false)});
    added.emplace(content, id);
  }
  return added;
}

// A {"type": "Sequence", key: [...]}: read(item, its field) for each item.
template <class Read>
void read_sequence(const Fields& f, const json& obj, const std::string& field, const char* key,
                   Read read) {
  f.only_keys(obj, field, {"type", key});
  const std::string items = field + "." + key;
  f.check(obj.contains(key) && obj[key].is_array(), items, "must be an array");
  for (size_t i = 0; i < obj[key].size(); ++i)
    read(obj[key][i], items + "[" + std::to_string(i) + "]");
}

void read_normalizer(const Fields& f, const json& n, const std::string& field, HfModel& m) {
  if (n.is_null()) return;
  const std::string type = f.type(n, field);
  if (type == "Sequence")
    return read_sequence(f, n, field, "normalizers", [&](const json& item, const std::string& at) {
      read_normalizer(f, item, at, m);
    });
  f.refuse_unless(type == "NFC", field + ".type", type);
  f.only_keys(n, field, {"type"});
  m.nfc = true;
}

void read_pre_tokenizer(const Fields& f, const json& p, const std::string& field, HfModel& m,
                        bool& byte_level) {
  f.check(!byte_level, field, "follows the ByteLevel pre-tokenizer, which must come last");
  const std::string type = f.type(p, field);
  if (type == "Sequence")
    return read_sequence(f, p, field, "pretokenizers", [&](const json& item, const std::string& at) {
      read_pre_tokenizer(f, item, at, m, byte_level);
    });
  if (type == "ByteLevel") {
    f.only_keys(p, field, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    if (f.flag(p, field, "add_prefix_space", true)) m.pre_tokenizer.push_back({nullptr, {}});
    if (f.flag(p, field, "use_regex", true))
      m.pre_tokenizer.push_back({std::make_unique<Pcre2Regex>(with_unicode_white_space(kGpt2Pattern)),
                                 PreTokenizerStep::Behavior::Isolated});
    byte_level = true;
    return;
  }
  f.refuse_unless(type == "Split", field + ".type", type);
  f.only_keys(p, field, {"type", "pattern", "behavior", "invert"});
  const json& pattern = p.value("pattern", json());
  f.check(pattern.is_object() && pattern.size() == 1 &&
              (pattern.contains("Regex") || pattern.contains("String")),
          field + ".pattern", "must be {\"Regex\": ...} or {\"String\": ...}");
  const std::string regex =
      pattern.contains("Regex")
          ? with_unicode_white_space(f.string(pattern["Regex"], field + ".pattern.Regex"))
          : escaped(f.string(pattern["String"], field + ".pattern.String"));
  using B = PreTokenizerStep::Behavior;
  static const std::vector<std::pair<std::string, B>> behaviors = {
      {"Removed", B::Removed},
      {"Isolated", B::Isolated},
      {"MergedWithPrevious", B::MergedWithPrevious},
      {"MergedWithNext", B::MergedWithNext},
      {"Contiguous", B::Contiguous}};
  const json& behavior = p.value("behavior", json());
  const auto b = std::find_if(behaviors.begin(), behaviors.end(),
                              [&](const auto& e) { return behavior == e.first; });
  f.refuse_unless(b != behaviors.end(), field + ".behavior", behavior);
  // Inverted, Hugging Face's Rust library keeps the behavior on the swapped pieces and its
  // JavaScript one keeps the matches alone: they agree only when the rest is Removed.
  const bool invert = f.flag(p, field, "invert", false);
  f.check(!invert || b->second == B::Removed, field + ".invert",
          "= true with behavior " + behavior.dump() + " is not supported: Hugging Face's Rust "
          "and JavaScript tokenizers split it differently (it is read with \"Removed\" only)");
  m.pre_tokenizer.push_back({std::make_unique<Pcre2Regex>(regex), b->second, invert});
}

// The special tokens a TemplateProcessing puts before and after a single sequence.
struct Template {
  std::optional<uint32_t> start, end;
};

void read_post_processor(const Fields& f, const json& p, const std::string& field, Template& t) {
  if (p.is_null()) return;
  const std::string type = f.type(p, field);
  if (type == "Sequence")
    return read_sequence(f, p, field, "processors", [&](const json& item, const std::string& at) {
      read_post_processor(f, item, at, t);
    });
  if (type == "ByteLevel") {  // offsets only
    f.only_keys(p, field, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
    return;
  }
  f.refuse_unless(type == "TemplateProcessing", field + ".type", type);
  f.only_keys(p, field, {"type", "single", "pair", "special_tokens"});
  const json& single = p.value("single", json());
  const json& specials = p.value("special_tokens", json());
  f.check(single.is_array() && specials.is_object(), field,
          "must have a \"single\" array and a \"special_tokens\" object");
  bool sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const json& piece = single[i];
    const std::string at = field + ".single[" + std::to_string(i) + "]";
    if (piece.contains("Sequence")) {
      f.refuse_unless(!sequence && piece["Sequence"].value("id", "") == "A", at, piece);
      sequence = true;
      continue;
    }
    f.check(piece.contains("SpecialToken") && piece["SpecialToken"].contains("id"), at,
            "must be a {\"Sequence\": ...} or a {\"SpecialToken\": ...}");
    const json& name = piece["SpecialToken"]["id"];
    f.check(name.is_string() && specials.contains(name.get<std::string>()), at,
            "names a special token that " + field + ".special_tokens does not hold");
    const json& ids = specials[name.get<std::string>()].value("ids", json());
    f.refuse_unless(ids.is_array() && ids.size() == 1, field + ".special_tokens." + name.dump() + ".ids",
                    ids);
    std::optional<uint32_t>& slot = sequence ? t.end : t.start;
    f.refuse_unless(!slot, at, piece);  // one token on each side at most
    slot = f.id(ids[0], field + ".special_tokens." + name.dump() + ".ids[0]");
  }
  f.check(sequence, field + ".single", "has no {\"Sequence\": {\"id\": \"A\"}}");
}

void read_decoder(const Fields& f, const json& d) {
  f.refuse_unless(!d.is_null() && f.type(d, "decoder") == "ByteLevel", "decoder", d);
  f.only_keys(d, "decoder", {"type", "add_prefix_space", "trim_offsets", "use_regex"});
}

// tokenizer_config.json's bos_token or eos_token: its id, nullopt when null; fallback when absent.
std::optional<uint32_t> config_token(const Fields& f, const json& config, const char* key,
                                     const HfModel& m,
                                     const std::unordered_map<std::string, uint32_t>& added,
                                     std::optional<uint32_t> fallback) {
  if (!config.contains(key)) return fallback;
  const json& v = config[key];
  if (v.is_null()) return std::nullopt;
  const std::string content =
      f.string(v.is_object() ? v.value("content", json()) : v, std::string(key));
  const std::optional<uint32_t> id = token_id(m, added, content);
  f.check(id.has_value(), key, "'" + content + "' is no token of the tokenizer");
  return id;
}

}  // namespace

std::unique_ptr<HfModel> read_hf_model(const std::string& tokenizer_json,
                                       const std::string& config_json) {
  auto m = std::make_unique<HfModel>();
  const Fields f(tokenizer_json);
  const json j = read_json(tokenizer_json, "Hugging Face tokenizer.json");
  f.only_keys(j, "(top level)",
              {"version", "truncation", "padding", "added_tokens", "normalizer", "pre_tokenizer",
               "post_processor", "decoder", "model"});
  for (const char* off : {"truncation", "padding"})
    if (j.contains(off)) f.refuse_unless(j[off].is_null(), off, j[off]);
  f.check(j.contains("model"), "model", "is missing");
  read_bpe(f, j["model"], *m);
  read_normalizer(f, j.value("normalizer", json()), "normalizer", *m);
  const auto added = read_added_tokens(f, j.value("added_tokens", json::array()), *m);
  bool byte_level = false;
  if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
    read_pre_tokenizer(f, j["pre_tokenizer"], "pre_tokenizer", *m, byte_level);
  f.check(byte_level, "pre_tokenizer", "has no ByteLevel step: not a byte-level BPE");
  Template t;
  read_post_processor(f, j.value("post_processor", json()), "post_processor", t);
  read_decoder(f, j.value("decoder", json()));
  m->vocab_size = static_cast<int64_t>(m->decoded.size());
  m->files = {{"tokenizer", tokenizer_json, HfTokenizer::kCopyName}};
  m->document_start = t.start;
  m->document_end = t.end;
  if (!config_json.empty()) {
    const Fields c(config_json);
    const json config = read_json(config_json, "Hugging Face tokenizer_config.json");
    c.refuse_unless(!c.flag(config, "(top level)", "split_special_tokens", false),
                    "split_special_tokens", true);
    m->document_start = config_token(c, config, "bos_token", *m, added, t.start);
    if (!c.flag(config, "(top level)", "add_bos_token", true)) m->document_start.reset();
    m->document_end = config_token(c, config, "eos_token", *m, added, t.end);
    m->files.push_back({"config", config_json, HfTokenizer::kConfigFile});
  }
  if (m->document_end == m->document_start) m->document_end.reset();
  return m;
}

}  // namespace mpitrain
