// Private to src/data: a compiled PCRE2 pattern (UTF-8, Unicode properties), RAII.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace mpitrain {

// pattern (the regex syntax of Python's `regex` module and of Oniguruma, Hugging Face's engine)
// with \s and \S written as explicit classes of Unicode White_Space, which is what \s means
// there; PCRE2's own \s also takes U+180E, which has not been white space since Unicode 6.3.
// UsageError naming the escape for \S inside [...] and for escapes that mean something else in
// PCRE2 than there (\h \H \v \V \R \N \w \W \b \B \X).
std::string with_unicode_white_space(const std::string& pattern);

class Pcre2Regex {
 public:
  // Compiles pattern with UTF, UCP and MATCH_INVALID_UTF (invalid bytes match nothing), JIT
  // where the library has it. Error with PCRE2's message if the pattern does not compile.
  explicit Pcre2Regex(const std::string& pattern);

  // Scratch space for matching, one per thread at a time.
  class Matcher {
   public:
    explicit Matcher(const Pcre2Regex& regex);
    // The next match at or after `from` in subject: true and [start, end), or false if none.
    bool next(std::string_view subject, size_t from, size_t& start, size_t& end);

   private:
    const Pcre2Regex& regex_;
    std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> data_;
  };

 private:
  std::unique_ptr<pcre2_code, void (*)(pcre2_code*)> code_;
  bool jit_ = false;
};

}  // namespace mpitrain
