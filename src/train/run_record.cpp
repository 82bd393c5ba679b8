#include "mpitrain/train/run_record.hpp"

#include <sstream>

namespace mpitrain {

std::string resolved_ini(const std::string& effective,
                         const std::vector<std::pair<std::string, std::string>>& resolved) {
  std::vector<std::pair<std::string, std::string>> values = resolved;
  values.emplace_back("overwrite", "false");
  values.emplace_back("resume", "");
  values.emplace_back("allow-seed-change", "false");
  std::vector<bool> used(values.size(), false);
  std::istringstream in(effective);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    const std::string key = line.substr(0, line.find(" = "));
    for (size_t i = 0; i < values.size(); ++i)
      if (!used[i] && values[i].first == key) {
        line = key + " = " + values[i].second;
        used[i] = true;
      }
    out += line + "\n";
  }
  for (size_t i = 0; i < values.size(); ++i)
    if (!used[i]) out += values[i].first + " = " + values[i].second + "\n";
  return out;
}

}  // namespace mpitrain
