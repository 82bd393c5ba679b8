// Private to src/data: Unicode normalization form C (ICU), for tokenizers whose normalizer is NFC.
#pragma once

#include <string>
#include <string_view>

namespace mpitrain {

// text in NFC. Bytes that are not UTF-8 are kept as they are; the valid runs between them are
// normalized each on its own.
std::string nfc(std::string_view text);

}  // namespace mpitrain
