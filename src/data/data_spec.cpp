#include "mpitrain/data/data_spec.hpp"

#include <glob.h>

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <memory>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

std::string trimmed(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t") + 1 - begin);
}

// The files a pattern names: glob(3)'s sorted matches, or the path itself when it has no glob
// character.
std::vector<std::string> expand(const std::string& pattern, const std::string& option) {
  if (pattern.find_first_of("*?[") == std::string::npos) return {pattern};
  glob_t found{};
  const std::unique_ptr<glob_t, void (*)(glob_t*)> release(&found, globfree);
  const int rc = ::glob(pattern.c_str(), GLOB_ERR, nullptr, &found);
  require(rc != GLOB_NOMATCH, "--" + option + ": '" + pattern + "' matches no file");
  if (rc != 0)
    throw UsageError("--" + option + ": cannot expand '" + pattern +
                     "': " + (rc == GLOB_ABORTED ? std::strerror(errno) : "out of memory"));
  return {found.gl_pathv, found.gl_pathv + found.gl_pathc};
}

double parse_weight(const std::string& text, const std::string& entry, const std::string& option) {
  double w = 0.0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), w);
  require(ec == std::errc() && end == text.data() + text.size() && std::isfinite(w) && w > 0,
          "--" + option + ": the weight of '" + entry + "' is '" + text +
              "', not a positive number (entries are [WEIGHT:]PATH_OR_GLOB)");
  return w;
}

}  // namespace

DataSpec parse_data_spec(const std::string& value, const std::string& option) {
  DataSpec spec;
  size_t weighted = 0;
  double total = 0.0;
  for (size_t begin = 0; begin <= value.size();) {
    const size_t comma = std::min(value.find(',', begin), value.size());
    const std::string entry = trimmed(value.substr(begin, comma - begin));
    begin = comma + 1;
    require(!entry.empty(), "--" + option + " '" + value +
                                "' has an empty entry (entries are [WEIGHT:]PATH_OR_GLOB, "
                                "separated by commas)");
    DataEntry e;
    e.pattern = entry;
    if (const size_t colon = entry.find(':'); colon != std::string::npos) {
      e.weight = parse_weight(trimmed(entry.substr(0, colon)), entry, option);
      e.pattern = trimmed(entry.substr(colon + 1));
      require(!e.pattern.empty(), "--" + option + ": '" + entry + "' has a weight but no path");
      ++weighted;
    }
    total += e.weight;
    e.files = expand(e.pattern, option);
    spec.entries.push_back(std::move(e));
  }
  require(weighted == 0 || weighted == spec.entries.size(),
          "--" + option + " '" + value + "': " + std::to_string(weighted) + " of " +
              std::to_string(spec.entries.size()) +
              " entries have a weight; give every entry one (a blend) or none (one corpus)");
  spec.weighted = weighted > 0;
  for (DataEntry& e : spec.entries) e.weight = spec.weighted ? e.weight / total : 1.0;
  return spec;
}

}  // namespace mpitrain
