// Private to src/data: a compiled PCRE2 pattern (UTF-8, Unicode properties), RAII.
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace mpitrain {

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
