// A small JSON reader (RFC 8259): enough to check and take apart the files the monitor writes
// (traces, report.json) without another dependency; and how the writers put a number.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mpitrain {

struct JsonValue {
  enum class Kind { Null, Bool, Number, String, Array, Object };
  Kind kind = Kind::Null;
  bool boolean = false;
  double number = 0.0;
  std::string string;
  std::vector<std::string> keys;  // Object: member names, in file order
  std::vector<JsonValue> items;   // Array: the elements; Object: the members' values
  std::string_view text;          // this value's own text in the parsed input

  // The member named key of an object, nullptr if absent (or not an object).
  const JsonValue* find(std::string_view key) const;
};

// A number as JSON text in "%.<digits>g", or null where it is not finite (JSON has no NaN or
// infinity): what every JSON file the project writes holds for nan and inf.
std::string json_number(double value, int digits = 6);

// Throws UsageError("<what> at line L, column C") on malformed input. The values' text views
// point into `text`, which must outlive them.
JsonValue parse_json(std::string_view text);

}  // namespace mpitrain
