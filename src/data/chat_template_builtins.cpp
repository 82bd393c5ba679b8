// The builtins of chat templates: jinja2's filters and tests, the str/dict/list methods the sandbox
// allows, transformers' globals and tojson, and Python's str() and repr() of values.
#include "chat_template_builtins.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "chat_template_ast.hpp"

namespace mpitrain::chat_template {

// ---- UTF-8 ----

namespace {

size_t utf8_char_length(unsigned char lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

uint32_t decode_utf8(std::string_view c) {
  if (c.size() == 1) return static_cast<unsigned char>(c[0]);
  uint32_t code = static_cast<unsigned char>(c[0]) & (0x7F >> c.size());
  for (size_t i = 1; i < c.size(); ++i)
    code = (code << 6) | (static_cast<unsigned char>(c[i]) & 0x3F);
  return code;
}

}  // namespace

// A string's characters (code points), each as its UTF-8 bytes.
std::vector<std::string_view> characters(std::string_view s) {
  std::vector<std::string_view> chars;
  for (size_t at = 0; at < s.size();) {
    const size_t n = std::min(utf8_char_length(static_cast<unsigned char>(s[at])), s.size() - at);
    chars.push_back(s.substr(at, n));
    at += n;
  }
  return chars;
}

size_t character_count(std::string_view s) {
  return static_cast<size_t>(
      std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

// ---- Python's str() and repr() ----

namespace {

std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  char buf[40];
  for (int precision = 0; precision < 17; ++precision) {  // the shortest that round-trips
    std::snprintf(buf, sizeof buf, "%.*e", precision, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  const std::string_view formatted = buf;
  const size_t e_at = formatted.find('e');
  const int exponent = std::atoi(buf + e_at + 1);
  std::string digits;
  for (char c : formatted.substr(0, e_at)) {
    if (std::isdigit(static_cast<unsigned char>(c))) digits += c;
  }
  std::string out = x < 0 ? "-" : "";
  if (exponent < -4 || exponent >= 16) {  // Python's repr switches to scientific notation
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    const int magnitude = std::abs(exponent);
    return out + (exponent < 0 ? "e-" : "e+") + (magnitude < 10 ? "0" : "") +
           std::to_string(magnitude);
  }
  const int point = exponent + 1;  // digits before the decimal point
  if (point <= 0) return out + "0." + std::string(static_cast<size_t>(-point), '0') + digits;
  const auto whole = static_cast<size_t>(point);
  if (whole >= digits.size()) return out + digits + std::string(whole - digits.size(), '0') + ".0";
  return out + digits.substr(0, whole) + "." + digits.substr(whole);
}

std::string string_repr(std::string_view s) {
  const bool double_quotes =
      s.find('\'') != std::string_view::npos && s.find('"') == std::string_view::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + quote;
}

std::string dict_repr(const Dict& dict) {
  std::string out = "{";
  for (const auto& [key, value] : dict) {
    if (out.size() > 1) out += ", ";
    out += repr(key) + ": " + repr(value);
  }
  return out + "}";
}

}  // namespace

std::string repr(const Value& v) {
  if (v.is<std::string>()) return string_repr(v.as<std::string>());
  if (v.is<Undefined>()) return "Undefined";
  return to_str(v);
}

std::string to_str(const Value& v) {
  switch (v.data.index()) {
    case 0:
      return "";
    case 1:
      return "None";
    case 2:
      return v.as<bool>() ? "True" : "False";
    case 3:
      return std::to_string(v.as<int64_t>());
    case 4:
      return float_repr(v.as<double>());
    case 5:
      return v.as<std::string>();
    case 6: {
      std::string out = "[";
      for (const Value& item : *v.as<std::shared_ptr<List>>()) {
        if (out.size() > 1) out += ", ";
        out += repr(item);
      }
      return out + "]";
    }
    case 7:
      return dict_repr(*v.as<std::shared_ptr<Dict>>());
    case 8:
      return "<Namespace " + dict_repr(v.as<std::shared_ptr<Namespace>>()->attributes) + ">";
    default:
      return "<function " + v.as<std::shared_ptr<const Callable>>()->name + ">";
  }
}

// ---- JSON (Python's json.dumps, as transformers' tojson calls it) ----

namespace {

struct JsonStyle {
  std::string indent;  // none: one line
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};

void append_json_escape(std::string& out, uint32_t code) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\u%04x", code);
  out += buf;
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (std::string_view c : characters(s)) {
    const uint32_t code = decode_utf8(c);
    switch (code) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (code < 0x20 || (ensure_ascii && code >= 0x7F && code < 0x10000)) {
          append_json_escape(out, code);
        } else if (ensure_ascii && code >= 0x10000) {
          append_json_escape(out, 0xD800 + ((code - 0x10000) >> 10));
          append_json_escape(out, 0xDC00 + ((code - 0x10000) & 0x3FF));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string json_float(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  return float_repr(x);
}

// A dict key as json.dumps converts it.
std::string json_key(const Value& key) {
  if (key.is<std::string>()) return key.as<std::string>();
  if (key.is<bool>()) return key.as<bool>() ? "true" : "false";
  if (key.is<int64_t>()) return std::to_string(key.as<int64_t>());
  if (key.is<double>()) return json_float(key.as<double>());
  if (key.is<None>()) return "null";
  throw EvalError("keys must be str, int, float, bool or None, not " + type_name(key));
}

void append_json(std::string& out, const Value& v, const JsonStyle& style, int depth);

// The separator before an item of a list or dict at `depth` (first: the opening newline).
void append_item_break(std::string& out, const JsonStyle& style, int depth, bool first) {
  if (!first) out += style.item_separator;
  if (!style.has_indent) return;
  out += '\n';
  for (int i = 0; i < depth; ++i) out += style.indent;
}

void append_json_list(std::string& out, const List& list, const JsonStyle& style, int depth) {
  if (list.empty()) {
    out += "[]";
    return;
  }
  out += '[';
  for (size_t i = 0; i < list.size(); ++i) {
    append_item_break(out, style, depth + 1, i == 0);
    append_json(out, list[i], style, depth + 1);
  }
  if (style.has_indent) append_item_break(out, style, depth, true);
  out += ']';
}

void append_json_dict(std::string& out, const Dict& dict, const JsonStyle& style, int depth) {
  if (dict.empty()) {
    out += "{}";
    return;
  }
  std::vector<std::pair<std::string, const Value*>> entries;
  for (const auto& [key, value] : dict) entries.emplace_back(json_key(key), &value);
  if (style.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
  }
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    append_item_break(out, style, depth + 1, i == 0);
    append_json_string(out, entries[i].first, style.ensure_ascii);
    out += style.key_separator;
    append_json(out, *entries[i].second, style, depth + 1);
  }
  if (style.has_indent) append_item_break(out, style, depth, true);
  out += '}';
}

void append_json(std::string& out, const Value& v, const JsonStyle& style, int depth) {
  if (depth > kMaxCallDepth) throw EvalError("tojson: nested too deeply");
  if (v.is<None>()) {
    out += "null";
  } else if (v.is<bool>()) {
    out += v.as<bool>() ? "true" : "false";
  } else if (v.is<int64_t>()) {
    out += std::to_string(v.as<int64_t>());
  } else if (v.is<double>()) {
    out += json_float(v.as<double>());
  } else if (v.is<std::string>()) {
    append_json_string(out, v.as<std::string>(), style.ensure_ascii);
  } else if (v.is<std::shared_ptr<List>>()) {
    append_json_list(out, *v.as<std::shared_ptr<List>>(), style, depth);
  } else if (v.is<std::shared_ptr<Dict>>()) {
    append_json_dict(out, *v.as<std::shared_ptr<Dict>>(), style, depth);
  } else {
    throw EvalError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

// ---- arguments of filters, methods and functions ----

namespace {

std::string require_string(const Value& v, std::string_view what) {
  if (v.is<Undefined>()) fail_undefined(v);
  if (!v.is<std::string>()) {
    throw EvalError(std::string(what) + " must be str, not " + type_name(v));
  }
  return v.as<std::string>();
}

}  // namespace

int64_t require_integer(const Value& v, std::string_view what) {
  if (v.is<Undefined>()) fail_undefined(v);
  if (!is_integer(v))
    throw EvalError(std::string(what) + " must be an integer, not " + type_name(v));
  return as_integer(v);
}

// ---- strings ----

namespace {

// Whether `c`, one character as characters() splits a string, is whitespace as Python's
// str.isspace() has it (and str.strip() and str.split() use); bytes not well-formed UTF-8 are not.
bool is_space(std::string_view c) {
  const uint32_t code = decode_utf8(c);
  const size_t encoded_size = code < 0x80 ? 1 : code < 0x800 ? 2 : code < 0x10000 ? 3 : 4;
  const bool well_formed =
      c.size() == encoded_size && (c.size() == 1 || (c[0] & 0xC0) == 0xC0) &&
      std::all_of(c.begin() + 1, c.end(), [](char b) { return (b & 0xC0) == 0x80; });
  return well_formed &&
         ((code >= 0x09 && code <= 0x0D) || (code >= 0x1C && code <= 0x20) || code == 0x85 ||
          code == 0xA0 || code == 0x1680 || (code >= 0x2000 && code <= 0x200A) || code == 0x2028 ||
          code == 0x2029 || code == 0x202F || code == 0x205F || code == 0x3000);
}

char ascii_upper(char c) { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 32) : c; }
char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }
bool is_ascii_alpha(char c) { return ascii_lower(c) >= 'a' && ascii_lower(c) <= 'z'; }

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ascii_lower);
  return s;
}
std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ascii_upper);
  return s;
}

// Python's str.strip/lstrip/rstrip: whitespace, or the characters of `chars`.
std::string strip(std::string_view s, const Value& chars, bool left, bool right) {
  std::vector<std::string_view> cs = characters(s);
  const bool by_chars = chars.is<std::string>();
  const std::vector<std::string_view> set =
      by_chars ? characters(chars.as<std::string>()) : std::vector<std::string_view>{};
  auto strippable = [&](std::string_view c) {
    if (!by_chars) return is_space(c);
    return std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t begin = 0, end = cs.size();
  while (left && begin < end && strippable(cs[begin])) ++begin;
  while (right && end > begin && strippable(cs[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cs[i];
  return out;
}

// Python's str.split / rsplit: by `sep`, or on runs of whitespace; at most `maxsplit` splits.
List split(std::string_view s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is<std::string>()) {
    const std::string& d = sep.as<std::string>();
    if (d.empty()) throw EvalError("empty separator");
    std::string_view rest = s;
    for (int64_t n = 0; maxsplit < 0 || n < maxsplit; ++n) {
      const size_t at = from_right ? rest.rfind(d) : rest.find(d);
      if (at == std::string_view::npos) break;
      parts.emplace_back(from_right ? rest.substr(at + d.size()) : rest.substr(0, at));
      rest = from_right ? rest.substr(0, at) : rest.substr(at + d.size());
    }
    parts.emplace_back(rest);
  } else {  // the words; after `maxsplit` of them, the rest whole but for its leading whitespace
    const std::vector<std::string_view> cs = characters(s);
    const size_t n = cs.size();
    // Character `i` of the walk: from the start, or for rsplit from the end.
    auto at = [&](size_t i) { return cs[from_right ? n - 1 - i : i]; };
    // Characters [begin, end) of the walk, as a string.
    auto text = [&](size_t begin, size_t end) {
      const size_t first = from_right ? n - end : begin, last = from_right ? n - begin : end;
      return std::string(cs[first].data(), cs[last - 1].data() + cs[last - 1].size());
    };
    size_t i = 0;
    for (int64_t splits = 0;; ++splits) {
      while (i < n && is_space(at(i))) ++i;
      if (i == n) break;
      if (maxsplit >= 0 && splits == maxsplit) {
        parts.push_back(text(i, n));
        break;
      }
      const size_t word = i;
      while (i < n && !is_space(at(i))) ++i;
      parts.push_back(text(word, i));
    }
  }
  if (from_right) std::reverse(parts.begin(), parts.end());
  List out;
  for (std::string& p : parts) out.push_back(str_value(std::move(p)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view replacement,
                    int64_t count) {
  std::string out;
  if (old.empty()) {  // Python inserts the replacement around every character
    int64_t n = 0;
    for (std::string_view c : characters(s)) {
      if (count < 0 || n++ < count) out += replacement;
      out += c;
    }
    if (count < 0 || n < count) out += replacement;
    return out;
  }
  size_t at = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    const size_t found = s.find(old, at);
    if (found == std::string_view::npos) break;
    out.append(s.substr(at, found - at)).append(replacement);
    at = found + old.size();
  }
  return out.append(s.substr(at));
}

// Python's str.title: words (runs of letters) start upper case, the rest lower case.
std::string python_title(std::string s) {
  bool previous_cased = false;
  for (char& c : s) {
    c = previous_cased ? ascii_lower(c) : ascii_upper(c);
    previous_cased = is_ascii_alpha(c);
  }
  return s;
}

std::string capitalize(std::string s) {
  s = lower(std::move(s));
  if (!s.empty()) s[0] = ascii_upper(s[0]);
  return s;
}

// jinja2's title filter: words split at whitespace, '-', '(', '{', '[', '<'.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (std::string_view c : characters(s)) {
    const bool separator = is_space(c) || (c.size() == 1 && std::string_view("-({[<").find(c[0]) !=
                                                                std::string_view::npos);
    out += c;
    if (!separator && c.size() == 1)
      out.back() = word_start ? ascii_upper(c[0]) : ascii_lower(c[0]);
    word_start = separator;
  }
  return out;
}

// Python's str.splitlines (newline kinds: \n, \r\n, \r, \v, \f, \x1c-\x1e).
List splitlines(std::string_view s, bool keep_ends) {
  List lines;
  size_t begin = 0;
  for (size_t at = 0; at < s.size(); ++at) {
    const char c = s[at];
    if (c != '\n' && c != '\r' && c != '\v' && c != '\f' && !(c >= '\x1c' && c <= '\x1e')) continue;
    const size_t break_end =
        (c == '\r' && at + 1 < s.size() && s[at + 1] == '\n') ? at + 2 : at + 1;
    lines.push_back(str_value(std::string(s.substr(begin, (keep_ends ? break_end : at) - begin))));
    begin = break_end;
    at = break_end - 1;
  }
  if (begin < s.size()) lines.push_back(str_value(std::string(s.substr(begin))));
  return lines;
}

bool all_chars(const std::string& s, int (*predicate)(int)) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [&](char c) {
    return static_cast<unsigned char>(c) < 0x80 && predicate(static_cast<unsigned char>(c));
  });
}

// startswith/endswith: a string, or a list (tuple) of them.
bool affix_matches(const std::string& s, const Value& affix, bool at_start) {
  if (affix.is<std::shared_ptr<List>>()) {
    const List& options = *affix.as<std::shared_ptr<List>>();
    return std::any_of(options.begin(), options.end(),
                       [&](const Value& o) { return affix_matches(s, o, at_start); });
  }
  const std::string a = require_string(affix, "startswith/endswith's argument");
  return at_start ? s.starts_with(a) : s.ends_with(a);
}

int64_t char_index(std::string_view s, size_t byte_offset) {
  if (byte_offset == std::string_view::npos) return -1;
  return static_cast<int64_t>(character_count(s.substr(0, byte_offset)));
}

std::string join(const List& items, const std::string& separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += to_str(items[i]);
  }
  return out;
}

}  // namespace

Value string_method(const std::string& s, const std::string& method, const Arguments& args) {
  if (method == "strip" || method == "lstrip" || method == "rstrip") {
    return str_value(strip(s, args.get(0, "chars"), method != "rstrip", method != "lstrip"));
  }
  if (method == "split" || method == "rsplit") {
    const Value maxsplit = args.get(1, "maxsplit", int_value(-1));
    return list_value(
        split(s, args.get(0, "sep"), require_integer(maxsplit, "maxsplit"), method == "rsplit"));
  }
  if (method == "startswith" || method == "endswith") {
    return Value{affix_matches(s, args.get(0, "prefix"), method == "startswith")};
  }
  if (method == "upper") return str_value(upper(s));
  if (method == "lower") return str_value(lower(s));
  if (method == "title") return str_value(python_title(s));
  if (method == "capitalize") return str_value(capitalize(s));
  if (method == "replace") {
    return str_value(replace(s, require_string(args.get(0, "old"), "replace's old"),
                             require_string(args.get(1, "new"), "replace's new"),
                             require_integer(args.get(2, "count", int_value(-1)), "count")));
  }
  if (method == "find")
    return int_value(char_index(s, s.find(require_string(args.get(0, "sub"), "find's argument"))));
  if (method == "rfind")
    return int_value(
        char_index(s, s.rfind(require_string(args.get(0, "sub"), "rfind's argument"))));
  if (method == "count") {
    const std::string sub = require_string(args.get(0, "sub"), "count's argument");
    if (sub.empty()) return int_value(static_cast<int64_t>(character_count(s)) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return int_value(n);
  }
  if (method == "join") return str_value(join(iterate(args.get(0, "iterable")), s));
  if (method == "splitlines") return list_value(splitlines(s, truthy(args.get(0, "keepends"))));
  if (method == "isdigit") return Value{all_chars(s, ::isdigit)};
  if (method == "isalpha") return Value{all_chars(s, ::isalpha)};
  if (method == "isalnum") return Value{all_chars(s, ::isalnum)};
  if (method == "isspace") {
    const std::vector<std::string_view> cs = characters(s);
    return Value{!cs.empty() && std::all_of(cs.begin(), cs.end(), is_space)};
  }
  if (method == "islower") return Value{s != upper(s) && s == lower(s)};
  if (method == "isupper") return Value{s != lower(s) && s == upper(s)};
  throw EvalError("'str' object has no attribute '" + method + "'");
}

Value dict_method(const Dict& dict, const std::string& method, const Arguments& args) {
  if (method == "get") {
    const Value* found = dict_find(dict, args.get(0, "key"));
    return found ? *found : args.get(1, "default", Value{None{}});
  }
  if (method == "items") {
    List pairs;
    for (const auto& [key, value] : dict) pairs.push_back(list_value({key, value}));
    return list_value(std::move(pairs));
  }
  if (method == "keys" || method == "values") {
    List out;
    for (const auto& [key, value] : dict) out.push_back(method == "keys" ? key : value);
    return list_value(std::move(out));
  }
  static constexpr std::array<std::string_view, 5> kMutating = {"pop", "popitem", "setdefault",
                                                                "update", "clear"};
  if (std::find(kMutating.begin(), kMutating.end(), method) != kMutating.end()) {
    throw EvalError("access to attribute '" + method + "' of 'dict' object is unsafe");
  }
  throw EvalError("'dict' object has no attribute '" + method + "'");
}

Value list_method(const List& list, const std::string& method, const Arguments& args) {
  if (method == "count") {
    const Value item = args.get(0, "value");
    return int_value(
        std::count_if(list.begin(), list.end(), [&](const Value& v) { return equals(v, item); }));
  }
  if (method == "index") {
    const Value item = args.get(0, "value");
    const auto found =
        std::find_if(list.begin(), list.end(), [&](const Value& v) { return equals(v, item); });
    if (found == list.end()) throw EvalError(repr(item) + " is not in list");
    return int_value(found - list.begin());
  }
  static constexpr std::array<std::string_view, 9> kMutating = {
      "append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", "copy"};
  if (std::find(kMutating.begin(), kMutating.end(), method) != kMutating.end()) {
    throw EvalError("access to attribute '" + method + "' of 'list' object is unsafe");
  }
  throw EvalError("'list' object has no attribute '" + method + "'");
}

// ---- tests ----

namespace {

// Python's `is`: the same object (small values of one type compare by value).
bool identical(const Value& a, const Value& b) {
  if (a.data.index() != b.data.index()) return false;
  if (a.is<std::shared_ptr<List>>())
    return a.as<std::shared_ptr<List>>() == b.as<std::shared_ptr<List>>();
  if (a.is<std::shared_ptr<Dict>>())
    return a.as<std::shared_ptr<Dict>>() == b.as<std::shared_ptr<Dict>>();
  return equals(a, b);
}

}  // namespace

bool apply_test(const std::string& name, const Value& v, const List& args) {
  auto arg = [&](size_t i) {
    if (i >= args.size()) throw EvalError("test '" + name + "' needs an argument");
    return args[i];
  };
  if (name == "defined") return !v.is<Undefined>();
  if (name == "undefined") return v.is<Undefined>();
  if (name == "none") return v.is<None>();
  if (name == "boolean") return v.is<bool>();
  if (name == "true") return v.is<bool>() && v.as<bool>();
  if (name == "false") return v.is<bool>() && !v.as<bool>();
  if (name == "integer") return v.is<int64_t>();
  if (name == "float") return v.is<double>();
  if (name == "number") return is_number(v);
  if (name == "string") return v.is<std::string>();
  if (name == "mapping") return v.is<std::shared_ptr<Dict>>();
  if (name == "iterable" || name == "sequence") {
    return v.is<Undefined>() || v.is<std::string>() || v.is<std::shared_ptr<List>>() ||
           v.is<std::shared_ptr<Dict>>();
  }
  if (name == "callable") return v.is<std::shared_ptr<const Callable>>();
  if (name == "lower") return to_str(v) == lower(to_str(v));
  if (name == "upper") return to_str(v) == upper(to_str(v));
  if (name == "even") return floor_mod(require_integer(v, "even's value"), 2) == 0;
  if (name == "odd") return floor_mod(require_integer(v, "odd's value"), 2) == 1;
  if (name == "divisibleby")
    return floor_mod(require_integer(v, "divisibleby's value"),
                     require_integer(arg(0), "divisibleby's argument")) == 0;
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, arg(0));
  if (name == "ne" || name == "!=") return !equals(v, arg(0));
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, arg(0), "<") < 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, arg(0), ">") > 0;
  if (name == "le" || name == "<=") return compare(v, arg(0), "<=") <= 0;
  if (name == "ge" || name == ">=") return compare(v, arg(0), ">=") >= 0;
  if (name == "in") return contains(arg(0), v);
  if (name == "sameas") return identical(v, arg(0));
  throw EvalError("unknown test '" + name + "'");
}

namespace {

constexpr auto kTests = std::to_array<std::string_view>(
    {"defined",     "undefined", "none",    "boolean", "true",        "false",
     "integer",     "float",     "number",  "string",  "mapping",     "iterable",
     "sequence",    "callable",  "lower",   "upper",   "even",        "odd",
     "divisibleby", "eq",        "equalto", "==",      "ne",          "!=",
     "lt",          "lessthan",  "<",       "gt",      "greaterthan", ">",
     "le",          "<=",        "ge",      ">=",      "in",          "sameas"});

}  // namespace

bool is_known_test(std::string_view name) {
  return std::find(kTests.begin(), kTests.end(), name) != kTests.end();
}

// ---- filters ----

namespace {

// An attribute path "a.b.0" as jinja2's filters (map, selectattr, join) look it up.
Value get_attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot - begin);
    const bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    v = get_item(v, numeric ? int_value(std::stoll(part)) : str_value(part));
    if (dot == std::string::npos) return v;
    begin = dot + 1;
  }
}

// The items of selectattr/rejectattr/select/reject that pass (or, `reject`, fail) the test.
Value select(const Value& v, const Arguments& args, bool by_attribute, bool keep) {
  const size_t test_at = by_attribute ? 1 : 0;
  const std::string attribute =
      by_attribute ? require_string(args.get(0, "attribute"), "attribute") : "";
  const std::string test =
      args.positional.size() > test_at ? require_string(args.positional[test_at], "test") : "";
  const List test_args(args.positional.begin() + static_cast<std::ptrdiff_t>(
                                                     std::min(args.positional.size(), test_at + 1)),
                       args.positional.end());
  List out;
  for (const Value& item : iterate(v)) {
    const Value tested = by_attribute ? get_attribute_path(item, attribute) : item;
    const bool passes = test.empty() ? truthy(tested) : apply_test(test, tested, test_args);
    if (passes == keep) out.push_back(item);
  }
  return list_value(std::move(out));
}

Value map_items(const Value& v, const Arguments& args) {
  List out;
  const Value attribute = args.keyword("attribute");
  for (const Value& item : iterate(v)) {
    if (!attribute.is<Undefined>()) {
      Value mapped = get_attribute_path(item, to_str(attribute));
      out.push_back(mapped.is<Undefined>() ? args.keyword("default", mapped) : mapped);
    } else {
      const std::string filter = require_string(args.get(0, "filter"), "map's filter");
      Arguments rest{List(args.positional.begin() + 1, args.positional.end()), args.keywords};
      out.push_back(apply_filter(filter, item, rest));
    }
  }
  return list_value(std::move(out));
}

// The key unique/sort/min/max compare items by (lower-cased strings unless case_sensitive).
Value sort_key(const Value& item, const Arguments& args, size_t case_at) {
  const Value attribute = args.get(case_at + 1, "attribute");
  Value key = attribute.is<Undefined>() ? item : get_attribute_path(item, to_str(attribute));
  if (key.is<std::string>() && !truthy(args.get(case_at, "case_sensitive", Value{false}))) {
    return str_value(lower(key.as<std::string>()));
  }
  return key;
}

Value unique(const Value& v, const Arguments& args) {
  List out, keys;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(item, args, 0);
    if (std::none_of(keys.begin(), keys.end(), [&](const Value& k) { return equals(k, key); })) {
      keys.push_back(std::move(key));
      out.push_back(item);
    }
  }
  return list_value(std::move(out));
}

Value sort(const Value& v, const Arguments& args) {
  List items = iterate(v);
  const bool reverse = truthy(args.get(0, "reverse", Value{false}));
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    const int order = compare(sort_key(a, args, 1), sort_key(b, args, 1), "<");
    return reverse ? order > 0 : order < 0;
  });
  return list_value(std::move(items));
}

Value extreme(const Value& v, const Arguments& args, bool largest) {
  const List items = iterate(v);
  if (items.empty()) return undefined("No aggregated item, sequence was empty.");
  const Value* best = &items[0];
  for (const Value& item : items) {
    const int order = compare(sort_key(item, args, 0), sort_key(*best, args, 0), "<");
    if (largest ? order > 0 : order < 0) best = &item;
  }
  return *best;
}

Value sum(const Value& v, const Arguments& args) {
  const Value attribute = args.get(0, "attribute");
  Value total = args.get(1, "start", int_value(0));
  for (const Value& item : iterate(v)) {
    total = arithmetic(
        "+", total, attribute.is<Undefined>() ? item : get_attribute_path(item, to_str(attribute)));
  }
  return total;
}

Value to_int(const Value& v, const Arguments& args) {
  const Value fallback = args.get(0, "default", int_value(0));
  if (v.is<Undefined>()) fail_undefined(v);
  if (is_integer(v)) return int_value(as_integer(v));
  if (v.is<double>()) {
    const double x = v.as<double>();
    return std::isfinite(x) ? int_value(static_cast<int64_t>(x)) : fallback;
  }
  if (!v.is<std::string>()) return fallback;
  std::string s = strip(v.as<std::string>(), Value{}, true, true);
  std::erase(s, '_');
  const int64_t base = require_integer(args.get(1, "base", int_value(10)), "base");
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(s.c_str(), &end, static_cast<int>(base));
  if (!s.empty() && *end == '\0' && errno == 0) return int_value(parsed);
  const double x = std::strtod(s.c_str(), &end);
  return (!s.empty() && *end == '\0' && std::isfinite(x)) ? int_value(static_cast<int64_t>(x))
                                                          : fallback;
}

Value to_float(const Value& v, const Arguments& args) {
  const Value fallback = args.get(0, "default", Value{0.0});
  if (v.is<Undefined>()) fail_undefined(v);
  if (is_number(v)) return Value{as_double(v)};
  if (!v.is<std::string>()) return fallback;
  const std::string s = strip(v.as<std::string>(), Value{}, true, true);
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  return (!s.empty() && *end == '\0') ? Value{x} : fallback;
}

Value round_number(const Value& v, const Arguments& args) {
  if (!is_number(v)) throw EvalError("round needs a number, not " + type_name(v));
  const int64_t precision = require_integer(args.get(0, "precision", int_value(0)), "precision");
  const std::string method = to_str(args.get(1, "method", str_value("common")));
  const double x = as_double(v), scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "ceil") return Value{std::ceil(x * scale) / scale};
  if (method == "floor") return Value{std::floor(x * scale) / scale};
  if (method != "common") throw EvalError("method must be common, ceil or floor");
  if (precision == 0) return Value{std::nearbyint(x)};
  char buf[512];  // Python's round: correctly rounded decimal, ties to even
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::clamp<int64_t>(precision, 0, 300)),
                x);
  return Value{std::strtod(buf, nullptr)};
}

std::string indent(const std::string& s, const Arguments& args) {
  const Value width = args.get(0, "width", int_value(4));
  const std::string indention =
      width.is<std::string>()
          ? width.as<std::string>()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, require_integer(width, "width"))),
                        ' ');
  const List lines = splitlines(s + "\n", false);
  const bool blank = truthy(args.get(2, "blank", Value{false}));
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as<std::string>();
    if (i > 0) out += "\n";
    if (i > 0 && (blank || !line.empty())) out += indention;
    out += line;
  }
  return truthy(args.get(1, "first", Value{false})) ? indention + out : out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string tojson(const Value& v, const Arguments& args) {
  JsonStyle style;
  style.ensure_ascii = truthy(args.get(0, "ensure_ascii", Value{false}));
  const Value indent_value = args.get(1, "indent", Value{None{}});
  if (!indent_value.is<None>()) {
    style.has_indent = true;
    style.indent = indent_value.is<std::string>()
                       ? indent_value.as<std::string>()
                       : std::string(static_cast<size_t>(std::max<int64_t>(
                                         0, require_integer(indent_value, "indent"))),
                                     ' ');
    style.item_separator = ",";
  }
  const Value separators = args.get(2, "separators", Value{None{}});
  if (!separators.is<None>()) {
    const List pair = iterate(separators);
    if (pair.size() != 2) throw EvalError("tojson's separators must be a pair");
    style.item_separator = require_string(pair[0], "separator");
    style.key_separator = require_string(pair[1], "separator");
  }
  style.sort_keys = truthy(args.get(3, "sort_keys", Value{false}));
  std::string out;
  append_json(out, v, style, 0);
  return out;
}

Value reverse(const Value& v) {
  if (v.is<std::string>()) {
    std::vector<std::string_view> chars = characters(v.as<std::string>());
    std::string out;
    for (auto c = chars.rbegin(); c != chars.rend(); ++c) out += *c;
    return str_value(std::move(out));
  }
  List items = iterate(v);
  std::reverse(items.begin(), items.end());
  return list_value(std::move(items));
}

Value items(const Value& v) {
  if (v.is<Undefined>()) return list_value({});
  if (!v.is<std::shared_ptr<Dict>>()) throw EvalError("Can only get item pairs from a mapping.");
  return dict_method(*v.as<std::shared_ptr<Dict>>(), "items", {});
}

Value first_or_last(const Value& v, bool last) {
  const List all = iterate(v);
  if (all.empty())
    return undefined(last ? "No last item, sequence was empty."
                          : "No first item, sequence was empty.");
  return last ? all.back() : all.front();
}

}  // namespace

Value apply_filter(const std::string& name, const Value& v, const Arguments& args) {
  if (name == "default" || name == "d") {
    const bool use_default =
        v.is<Undefined>() || (truthy(args.get(1, "boolean", Value{false})) && !truthy(v));
    return use_default ? args.get(0, "default_value", str_value("")) : v;
  }
  if (name == "tojson") return str_value(tojson(v, args));
  if (name == "safe") return v;
  if (name == "length" || name == "count") return int_value(length(v));
  if (name == "string") return str_value(to_str(v));
  if (name == "trim") return str_value(strip(to_str(v), args.get(0, "chars"), true, true));
  if (name == "lower") return str_value(lower(to_str(v)));
  if (name == "upper") return str_value(upper(to_str(v)));
  if (name == "title") return str_value(jinja_title(to_str(v)));
  if (name == "capitalize") return str_value(capitalize(to_str(v)));
  if (name == "replace") {
    return str_value(replace(to_str(v), to_str(args.get(0, "old")), to_str(args.get(1, "new")),
                             require_integer(args.get(2, "count", int_value(-1)), "count")));
  }
  if (name == "e" || name == "escape") return str_value(html_escape(to_str(v)));
  if (name == "indent") return str_value(indent(to_str(v), args));
  if (name == "join") {
    const Value attribute = args.get(1, "attribute");
    const Value items = attribute.is<Undefined>()
                            ? list_value(iterate(v))
                            : map_items(v, Arguments{{}, {{"attribute", attribute}}});
    return str_value(
        join(*items.as<std::shared_ptr<List>>(), to_str(args.get(0, "d", str_value("")))));
  }
  if (name == "first" || name == "last") return first_or_last(v, name == "last");
  if (name == "reverse") return reverse(v);
  if (name == "list") return list_value(iterate(v));
  if (name == "items") return items(v);
  if (name == "selectattr" || name == "rejectattr")
    return select(v, args, true, name == "selectattr");
  if (name == "select" || name == "reject") return select(v, args, false, name == "select");
  if (name == "map") return map_items(v, args);
  if (name == "unique") return unique(v, args);
  if (name == "sort") return sort(v, args);
  if (name == "min" || name == "max") return extreme(v, args, name == "max");
  if (name == "sum") return sum(v, args);
  if (name == "int") return to_int(v, args);
  if (name == "float") return to_float(v, args);
  if (name == "abs") {
    if (v.is<double>()) return Value{std::fabs(v.as<double>())};
    const int64_t i = require_integer(v, "abs's value");
    return i < 0 ? arithmetic("-", int_value(0), int_value(i)) : int_value(i);
  }
  if (name == "round") return round_number(v, args);
  throw EvalError("unknown filter '" + name + "'");
}

namespace {

constexpr auto kFilters = std::to_array<std::string_view>(
    {"default", "d",      "tojson", "safe",       "length",  "count", "string",     "trim",
     "lower",   "upper",  "title",  "capitalize", "replace", "e",     "escape",     "indent",
     "join",    "first",  "last",   "reverse",    "list",    "items", "selectattr", "rejectattr",
     "select",  "reject", "map",    "unique",     "sort",    "min",   "max",        "sum",
     "int",     "float",  "abs",    "round"});

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(kFilters.begin(), kFilters.end(), name) != kFilters.end();
}

// ---- globals ----

namespace {

constexpr int64_t kMaxRange = 100'000;  // jinja2's sandbox refuses longer range()s

Value range(const Arguments& args) {
  if (!args.keywords.empty() || args.positional.empty() || args.positional.size() > 3) {
    throw EvalError("range expects 1 to 3 integer arguments");
  }
  std::vector<int64_t> n;
  for (const Value& v : args.positional) n.push_back(require_integer(v, "range's argument"));
  const int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1];
  const int64_t step = n.size() == 3 ? n[2] : 1;
  if (step == 0) throw EvalError("range() arg 3 must not be zero");
  const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                 static_cast<double>(step));
  if (count > static_cast<double>(kMaxRange)) {
    throw EvalError("range too big, the sandbox allows at most " + std::to_string(kMaxRange) +
                    " items");
  }
  List out;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(int_value(i));
  return list_value(std::move(out));
}

// namespace(...) and dict(...): the entries of positional dicts, then the keywords.
Dict entries_of(const Arguments& args) {
  Dict dict;
  auto put = [&](Value key, Value value) {
    for (auto& entry : dict) {
      if (equals(entry.first, key)) {
        entry.second = std::move(value);
        return;
      }
    }
    dict.emplace_back(std::move(key), std::move(value));
  };
  for (const Value& v : args.positional) {
    if (!v.is<std::shared_ptr<Dict>>()) throw EvalError("expected a dict, got " + type_name(v));
    for (const auto& [key, value] : *v.as<std::shared_ptr<Dict>>()) put(key, value);
  }
  for (const auto& [key, value] : args.keywords) put(str_value(key), value);
  return dict;
}

std::string strftime_now(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  for (size_t size = 256; size <= 65536; size *= 4) {
    std::string out(size, '\0');
    const size_t n = std::strftime(out.data(), out.size(), format.c_str(), &local);
    if (n > 0 || format.empty()) return out.substr(0, n);
  }
  return "";
}

}  // namespace

Value call_builtin(Builtin builtin, const Arguments& args) {
  switch (builtin) {
    case Builtin::kRaiseException:
      throw EvalError("raise_exception: " + to_str(args.get(0, "message")));
    case Builtin::kStrftimeNow:
      return str_value(
          strftime_now(require_string(args.get(0, "format"), "strftime_now's format")));
    case Builtin::kNamespace:
      return Value{std::make_shared<Namespace>(Namespace{entries_of(args)})};
    case Builtin::kRange:
      return range(args);
    case Builtin::kDict:
      return dict_value(entries_of(args));
  }
  throw EvalError("unknown function");
}

std::vector<std::pair<std::string, Value>> global_functions() {
  static constexpr std::array<std::pair<const char*, Builtin>, 5> kGlobals = {{
      {"raise_exception", Builtin::kRaiseException},
      {"strftime_now", Builtin::kStrftimeNow},
      {"namespace", Builtin::kNamespace},
      {"range", Builtin::kRange},
      {"dict", Builtin::kDict},
  }};
  std::vector<std::pair<std::string, Value>> globals;
  for (const auto& [name, builtin] : kGlobals) {
    globals.emplace_back(name, Value{std::make_shared<const Callable>(Callable{builtin, name})});
  }
  return globals;
}

}  // namespace mpitrain::chat_template
