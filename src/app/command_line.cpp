#include "mpitrain/app/command_line.hpp"

namespace mpitrain {

boost::program_options::parsed_options parse_last_wins(
    int argc, const char* const* argv, const boost::program_options::options_description& desc) {
  boost::program_options::parsed_options flags =
      boost::program_options::parse_command_line(argc, argv, desc);
  for (size_t i = 0; i < flags.options.size(); ++i)
    for (size_t j = i + 1; j < flags.options.size(); ++j)
      if (flags.options[j].string_key == flags.options[i].string_key) {
        flags.options.erase(flags.options.begin() + i--);
        break;
      }
  return flags;
}

}  // namespace mpitrain
