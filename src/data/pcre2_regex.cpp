// A compiled PCRE2 pattern and its matcher; every PCRE2 error is reported with its own text.
#include "pcre2_regex.hpp"

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(code, buffer, sizeof buffer) < 0)
    return "PCRE2 error " + std::to_string(code);
  return reinterpret_cast<const char*>(buffer);
}

// Unicode White_Space: TAB..CR, space, NEL, NBSP, Ogham space, en quad..hair space, line and
// paragraph separators, narrow NBSP, medium mathematical space, ideographic space.
constexpr const char* kWhiteSpace = R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A})"
                                    R"(\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

}  // namespace

std::string with_unicode_white_space(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      require(std::string_view("hHvVRNwWbBX").find(e) == std::string_view::npos,
              "regex '" + pattern + "': \\" + e +
                  " means one thing in PCRE2 and another in the regex engines of Python and "
                  "Hugging Face; it is not supported");
      require(!(in_class && e == 'S'),
              "regex '" + pattern + "': \\S inside [...] is not supported");
      if (e == 's')
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      else if (e == 'S')
        out += "[^" + std::string(kWhiteSpace) + "]";
      else
        out += std::string{c, e};
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' first in the class (after an optional '^') is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Pcre2Regex::Pcre2Regex(const std::string& pattern) : code_(nullptr, pcre2_code_free) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset,
                            nullptr));
  if (!code_)
    MPITRAIN_THROW("PCRE2 cannot compile '" + pattern + "' at offset " + std::to_string(offset) +
                   ": " + pcre2_message(error));
  const int jit = pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE);
  // A library built without JIT says so; the interpreter then matches the same.
  if (jit != 0 && jit != PCRE2_ERROR_JIT_BADOPTION)
    MPITRAIN_THROW("PCRE2 cannot JIT-compile '" + pattern + "': " + pcre2_message(jit));
  jit_ = jit == 0;
}

Pcre2Regex::Matcher::Matcher(const Pcre2Regex& regex)
    : regex_(regex),
      data_(pcre2_match_data_create_from_pattern(regex.code_.get(), nullptr),
            pcre2_match_data_free) {
  if (!data_) MPITRAIN_THROW("PCRE2 cannot allocate match data (out of memory)");
}

bool Pcre2Regex::Matcher::next(std::string_view subject, size_t from, size_t& start, size_t& end) {
  const auto match = regex_.jit_ ? pcre2_jit_match : pcre2_match;
  const int rc = match(regex_.code_.get(), reinterpret_cast<PCRE2_SPTR>(subject.data()),
                       subject.size(), from, 0, data_.get(), nullptr);
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  if (rc < 0) MPITRAIN_THROW("PCRE2 matching failed: " + pcre2_message(rc));
  const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data_.get());
  start = ovector[0];
  end = ovector[1];
  return true;
}

}  // namespace mpitrain
