#include "mpitrain/app/help_format.hpp"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <stdexcept>

#include "mpitrain/io/shortest_text.hpp"

namespace po = boost::program_options;

namespace mpitrain {

namespace {

constexpr size_t kDescriptionColumn = 30;  // names and placeholder up to 28 columns fit beside
constexpr char kGlue = '\x1f';  // a space that wrap() does not break at: "(default: 0)" stays whole

// Takes no value (--help) or an optional one (--overwrite, the same as --overwrite=true).
bool is_flag(const po::option_description& option) { return option.semantic()->min_tokens() == 0; }

// Boost keeps a value_name only inside name(), as "NAME (=default)", or "arg" when none is set.
std::string placeholder(const po::value_semantic& semantic) {
  const std::string name = semantic.name();
  const std::string given = name.substr(0, name.find(' '));
  if (given != "arg") return given;
  const auto* typed = dynamic_cast<const po::typed_value_base*>(&semantic);
  if (!typed) return "TEXT";
  const std::type_info& type = typed->value_type();
  if (type == typeid(int) || type == typeid(uint64_t)) return "N";
  if (type == typeid(double) || type == typeid(float)) return "X";
  return "TEXT";
}

std::string names(const po::option_description& option) {
  const std::string dashed = "--" + option.long_name();
  const std::string brief =
      option.canonical_display_name(po::command_line_style::allow_dash_for_short);
  return brief.size() == 2 && brief[0] == '-' ? brief + ", " + dashed : dashed;
}

// " (default: X)"; nothing for an empty string or a flag that is off, and a flag that is on
// says how to turn it off.
std::string default_note(const po::option_description& option) {
  boost::any value;
  if (!option.semantic()->apply_default(value)) return "";
  const std::string text = format_value(value);
  if (is_flag(option))
    return text == "true" ? " (on by default; --" + option.long_name() + "=false turns it off)"
                          : "";
  return text.empty() ? "" : " (default:" + std::string(1, kGlue) + text + ")";
}

// "; range (0, 10]": the note given for the option, kept whole by wrap().
std::string note_text(const po::option_description& option, const HelpNote& note) {
  std::string text = note ? note(option.long_name()) : "";
  if (text.empty()) return "";
  std::replace(text.begin(), text.end(), ' ', kGlue);
  return text.insert(0, "; ");
}

std::string entry(const po::option_description& option, size_t width, const HelpNote& note) {
  std::string out = "  ";
  out += names(option);
  if (!is_flag(option)) out.append(" ").append(placeholder(*option.semantic()));
  // Two spaces at least before the description, else it starts on the next line.
  if (out.size() + 2 > kDescriptionColumn)
    out.append("\n").append(kDescriptionColumn, ' ');
  else
    out.append(kDescriptionColumn - out.size(), ' ');
  std::string text = wrap(option.description() + note_text(option, note) + default_note(option),
                          kDescriptionColumn, kDescriptionColumn, width);
  std::replace(text.begin(), text.end(), kGlue, ' ');
  return out.append(text).append("\n");
}

}  // namespace

std::string format_value(const boost::any& value) {
  if (const auto* s = boost::any_cast<std::string>(&value)) return *s;
  if (const auto* i = boost::any_cast<int>(&value)) return std::to_string(*i);
  if (const auto* u = boost::any_cast<uint64_t>(&value)) return std::to_string(*u);
  if (const auto* d = boost::any_cast<double>(&value)) return shortest_text(*d);
  if (const auto* f = boost::any_cast<float>(&value)) return shortest_text(*f);
  if (const auto* b = boost::any_cast<bool>(&value)) return *b ? "true" : "false";
  throw std::logic_error(std::string("format_value: no format for ") + value.type().name());
}

std::string wrap(const std::string& text, size_t start, size_t indent, size_t width) {
  std::istringstream words(text);
  std::string out, word;
  size_t column = start;
  bool line_empty = true;
  while (words >> word) {
    if (!line_empty && column + 1 + word.size() > width) {
      out.append("\n").append(indent, ' ');
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    line_empty = false;
  }
  return out;
}

std::string format_help(const std::string& intro, const std::vector<HelpGroup>& groups,
                        size_t width, const HelpNote& note) {
  std::string out = intro;
  for (const HelpGroup& group : groups) {
    out += "\n" + group.caption + ":\n";
    for (const auto& option : group.options.options()) out += entry(*option, width, note);
  }
  return out;
}

}  // namespace mpitrain
