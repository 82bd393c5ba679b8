// --help text from Boost.Program_options descriptions, as a user reads it: options under group
// headings, each with its names, a value placeholder and its default as a user writes it
// (1e-05, 0.9; a flag as plain --overwrite), descriptions wrapped at word boundaries.
#pragma once

#include <boost/any.hpp>
#include <boost/program_options.hpp>
#include <functional>
#include <string>
#include <vector>

namespace mpitrain {

// One heading of the help and the options under it.
struct HelpGroup {
  std::string caption;
  boost::program_options::options_description options;
};

inline constexpr size_t kHelpWidth = 100;

// Extra text for an option's entry by its long name, "" for none ("range (0, 10]").
using HelpNote = std::function<std::string(const std::string& long_name)>;

// `intro` as it is, then each group: "caption:" and one entry per option, its description, its
// note ("; range (0, 10]") and its default wrapped to `width`. The value placeholder is the
// option's value_name, else N (integers), X (reals) or TEXT.
std::string format_help(const std::string& intro, const std::vector<HelpGroup>& groups,
                        size_t width = kHelpWidth, const HelpNote& note = {});

// A value as a user would type it: integers as such, reals in the shortest "%g" form that reads
// back to the same value (1e-05, 0.003), strings as they are.
std::string format_value(const boost::any& value);

// The words of `text` on lines of at most `width` columns, every line after the first indented
// by `indent` spaces, the first continuing from column `start`; a word is never split.
std::string wrap(const std::string& text, size_t start, size_t indent, size_t width);

}  // namespace mpitrain
