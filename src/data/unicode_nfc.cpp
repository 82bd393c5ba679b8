// NFC through ICU's Normalizer2 on UTF-8; every ICU status is checked and reported by its name.
#include "unicode_nfc.hpp"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

#include <climits>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

void check(UErrorCode status, const char* what) {
  if (U_FAILURE(status)) MPITRAIN_THROW(std::string("ICU ") + what + ": " + u_errorName(status));
}

// Appends run, a valid UTF-8 string, to out in NFC.
void append_nfc(const icu::Normalizer2& form, std::string_view run, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::StringPiece piece(run.data(), static_cast<int32_t>(run.size()));
  const bool normalized = form.isNormalizedUTF8(piece, status);
  check(status, "cannot check NFC");
  if (normalized) {
    out += run;
    return;
  }
  icu::StringByteSink<std::string> sink(&out);
  form.normalizeUTF8(0, piece, sink, nullptr, status);
  check(status, "cannot normalize to NFC");
}

}  // namespace

std::string nfc(std::string_view text) {
  require(text.size() < INT_MAX, "a text of " + std::to_string(text.size()) +
                                     " bytes is too long to normalize (NFC): at most 2 GiB");
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* form = icu::Normalizer2::getNFCInstance(status);
  check(status, "has no NFC normalizer");
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  int32_t run = 0;  // where the current valid run starts
  for (int32_t i = 0; i < length;) {
    const int32_t at = i;
    UChar32 c = 0;
    U8_NEXT(s, i, length, c);
    if (c >= 0) continue;
    append_nfc(*form, text.substr(run, at - run), out);
    out += text.substr(at, i - at);  // not UTF-8: kept
    run = i;
  }
  append_nfc(*form, text.substr(run), out);
  return out;
}

}  // namespace mpitrain
