#include "mpitrain/app/suggest.hpp"

#include <algorithm>
#include <cctype>

namespace mpitrain {

namespace {

constexpr int kMaxDistance = 2;

std::string_view without_dashes(std::string_view name) {
  return name.substr(std::min(name.find_first_not_of('-'), name.size()));
}

// How people miswrite option names without meaning another one: case and '_' for '-'.
std::string normalised(std::string_view name) {
  std::string out(without_dashes(name));
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
  return out;
}

}  // namespace

int edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: distance between the first i characters of a and the first j of b.
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const int substitution = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::vector<std::string> nearest_options(std::string_view given,
                                         const boost::program_options::options_description& desc) {
  const std::string wanted = normalised(given);
  int best = std::min(kMaxDistance, static_cast<int>(wanted.size()) / 2);
  std::vector<std::string> nearest;
  for (const auto& option : desc.options()) {
    const std::string& name = option->long_name();
    const int distance = edit_distance(wanted, name);
    if (name.empty() || distance > best) continue;
    if (distance < best) nearest.clear();
    best = distance;
    nearest.push_back(name);
  }
  return nearest;
}

std::string did_you_mean(std::string_view given,
                         const boost::program_options::options_description& desc) {
  const std::vector<std::string> names = nearest_options(given, desc);
  if (names.empty()) return "";
  const std::string dashes(given.substr(0, given.size() - without_dashes(given).size()));
  std::string text = " (did you mean ";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + dashes + names[i];
  return text + "?)";
}

}  // namespace mpitrain
