// Command lines and INI files the project's way (the trainer's and the tools'): a flag given
// twice takes its last value, so scripts can append overrides to a base command (except the
// flags that take a list, where a repeat is most likely a list meant); an unknown
// option's error names the known ones nearest to it (app/suggest.hpp).
#pragma once

#include <boost/program_options.hpp>
#include <istream>
#include <string>
#include <vector>

namespace mpitrain {

// boost::program_options::parse_command_line, keeping only the last occurrence of each option;
// throws Boost's errors as that does, an unknown option's as a po::error ending in
// " (did you mean --steps?)" when a known name is near, a word outside any option as one, and
// an option of `lists` given twice as one ("give a list instead: --train-data a.h5,b.h5").
boost::program_options::parsed_options parse_last_wins(
    int argc, const char* const* argv, const boost::program_options::options_description& desc,
    const std::vector<std::string>& lists = {});

// boost::program_options::parse_config_file, an unknown name's error with the same suggestion.
boost::program_options::parsed_options parse_ini(
    std::istream& in, const boost::program_options::options_description& desc);

}  // namespace mpitrain
