// What the bench programs share: their numeric arguments and the best-of-N timer.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

// A positive integer (at most 10^6); false if `text` is not one.
inline bool parse_positive(const std::string& text, int* out) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || value <= 0 || value > 1000000) return false;
  *out = static_cast<int>(value);
  return true;
}

// A comma-separated list of them ("1,2").
inline bool parse_list(const std::string& text, std::vector<int>* out) {
  std::stringstream ss(text);
  std::string item;
  out->clear();
  while (std::getline(ss, item, ',')) {
    int v = 0;
    if (!parse_positive(item, &v)) return false;
    out->push_back(v);
  }
  return !out->empty();
}

// take(flag, value) for each "--flag value" pair of argv[1..]; false where a value is missing or
// take refuses the pair (an unknown flag, a bad value).
template <class F>
bool parse_pairs(int argc, char** argv, F&& take) {
  for (int i = 1; i < argc; i += 2)
    if (i + 1 >= argc || !take(std::string(argv[i]), std::string(argv[i + 1]))) return false;
  return true;
}

// Best seconds of `repeats` calls of f after one warm-up call.
template <class F>
double best_seconds(int repeats, F&& f) {
  double best = 1e30;
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::min(best, s);
  }
  return best;
}

}  // namespace bench
