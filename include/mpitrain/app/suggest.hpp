// "Did you mean": the known option names nearest to a mistyped one (--stpes -> --steps,
// --n_layer -> --n-layer), or the one meant by another trainer's name for it (nanoGPT, Hugging
// Face, Megatron-LM, torchtitan: --learning-rate -> --lr, --max-iters -> --steps), for the error
// of an unknown option.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace mpitrain {

// Damerau-Levenshtein distance (optimal string alignment): insertions, deletions, substitutions
// and swaps of two neighbours count one each.
int edit_distance(std::string_view a, std::string_view b);

// The long names in `desc` that `given` means (leading dashes ignored, '_' read as '-', case
// ignored): the option(s) a name another trainer uses stands for (when desc has them), else all
// those at the smallest edit distance; none when that is over 2 or over half the length of
// `given`, so that a short or far-off name gets no guess.
std::vector<std::string> nearest_options(std::string_view given,
                                         const boost::program_options::options_description& desc);

// " (did you mean --steps?)", with the dashes `given` was written with, and for another trainer's
// name how it translates where that differs (" (did you mean --global-batch-size? it is
// micro-batch-size x accumulation steps x dp)"); "" when nothing is near.
std::string did_you_mean(std::string_view given,
                         const boost::program_options::options_description& desc);

}  // namespace mpitrain
