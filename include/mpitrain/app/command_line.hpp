// Command lines the project's way (the trainer's and the tools'): a flag given twice takes its
// last value, so scripts can append overrides to a base command.
#pragma once

#include <boost/program_options.hpp>

namespace mpitrain {

// boost::program_options::parse_command_line, keeping only the last occurrence of each option;
// throws Boost's errors as that does.
boost::program_options::parsed_options parse_last_wins(
    int argc, const char* const* argv, const boost::program_options::options_description& desc);

}  // namespace mpitrain
