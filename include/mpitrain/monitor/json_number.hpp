// How the JSON writers (metrics.jsonl, report.json, the guard's diagnostics) put a number.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

namespace mpitrain {

// A number as JSON text in "%.<digits>g", or null where it is not finite (JSON has no NaN or
// infinity): what every JSON file the project writes holds for nan and inf.
inline std::string json_number(double value, int digits = 6) {
  if (!std::isfinite(value)) return "null";
  char text[40];
  std::snprintf(text, sizeof text, "%.*g", digits, value);
  return text;
}

}  // namespace mpitrain
