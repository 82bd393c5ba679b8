// A number as the shortest decimal text that reads back as the same value: what every file the
// project writes for a user's float holds (run.ini, manifests, config.json, data lists, --help).
#pragma once

#include <charconv>
#include <concepts>
#include <string>

namespace mpitrain {

// std::to_chars without a precision: "1e-05" for the float 1e-5f, where the float widened to
// double and printed would give 9.999999747378752e-06; "0.003" for 3e-3.
template <std::floating_point F>
std::string shortest_text(F value) {
  char text[40];
  return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

}  // namespace mpitrain
