// Valid ranges of numeric options: one table per program, next to its option definitions, that
// --help prints and start-up checks (flags and config-file values alike). A value must be a
// finite number inside its range; inf and nan never are.
#pragma once

#include <boost/program_options.hpp>
#include <limits>
#include <string>
#include <vector>

namespace mpitrain {

inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();

struct OptionRange {
  const char* name;  // the option's long name
  double lo, hi;     // hi = kUnbounded: any finite value from lo up (integers: up to the type's)
  bool lo_open = false, hi_open = false;  // the end itself is outside
};

// "(0, 10]", "[1, 2147483647]"-style interval, or ">= 0" / "> 0" when unbounded above.
std::string range_text(const OptionRange& range);

// Whether a finite `value` lies inside `range` (never for inf or nan).
bool in_range(const OptionRange& range, double value);

// Throws UsageError naming the first option of `ranges` whose value in `vm` (a number of any
// type the options use) lies outside its range: "lr must lie in (0, 10] (got inf)".
void check_ranges(const std::vector<OptionRange>& ranges,
                  const boost::program_options::variables_map& vm);

// A range's text for --help, "" for an option without one (help_format.hpp's `note`).
std::string range_note(const std::vector<OptionRange>& ranges, const std::string& name);

}  // namespace mpitrain
