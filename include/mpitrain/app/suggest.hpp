// "Did you mean": the known option names nearest to a mistyped one (--stpes -> --steps,
// --n_layer -> --n-layer), for the error of an unknown option.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace mpitrain {

// Damerau-Levenshtein distance (optimal string alignment): insertions, deletions, substitutions
// and swaps of two neighbours count one each.
int edit_distance(std::string_view a, std::string_view b);

// The long names in `desc` nearest to `given` (leading dashes ignored, '_' read as '-', case
// ignored), all those at the smallest distance; none when that is over 2 or over half the
// length of `given`, so that a short or far-off name gets no guess.
std::vector<std::string> nearest_options(std::string_view given,
                                         const boost::program_options::options_description& desc);

// " (did you mean --steps?)", with the dashes `given` was written with; "" when nothing is near.
std::string did_you_mean(std::string_view given,
                         const boost::program_options::options_description& desc);

}  // namespace mpitrain
