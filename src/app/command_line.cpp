#include "mpitrain/app/command_line.hpp"

#include <algorithm>

#include "mpitrain/app/suggest.hpp"

namespace po = boost::program_options;

namespace mpitrain {

namespace {

// As a plain po::error, so that callers report it as they report any other parse error.
[[noreturn]] void throw_with_suggestion(const po::unknown_option& e,
                                        const po::options_description& desc) {
  throw po::error(e.what() + did_you_mean(e.get_option_name(), desc));
}

}  // namespace

po::parsed_options parse_last_wins(int argc, const char* const* argv,
                                   const po::options_description& desc,
                                   const std::vector<std::string>& lists) {
  po::parsed_options flags(&desc);
  try {
    // Whole names only: Boost's default guesses "--lr-schedul" to mean --lr-schedule, so a typo
    // (or a future option sharing a prefix) would silently pick an option.
    namespace style = po::command_line_style;
    flags = po::command_line_parser(argc, argv)
                .options(desc)
                .style(style::default_style & ~style::allow_guessing)
                .run();
  } catch (const po::unknown_option& e) {
    throw_with_suggestion(e, desc);
  }
  for (const po::option& o : flags.options)
    if (o.string_key.empty() || o.position_key >= 0)  // a word that belongs to no option
      throw po::error("unexpected argument '" +
                      (o.original_tokens.empty() ? std::string() : o.original_tokens[0]) +
                      "': every value follows its option (--name value)");
  for (size_t i = 0; i < flags.options.size(); ++i)
    for (size_t j = i + 1; j < flags.options.size(); ++j)
      if (flags.options[j].string_key == flags.options[i].string_key) {
        const std::string& name = flags.options[i].string_key;
        if (std::find(lists.begin(), lists.end(), name) != lists.end())
          throw po::error("--" + name + " is given twice; give a list instead: --" + name +
                          " a.h5,b.h5");
        flags.options.erase(flags.options.begin() + i--);
        break;
      }
  return flags;
}

po::parsed_options parse_ini(std::istream& in, const po::options_description& desc) {
  try {
    return po::parse_config_file(in, desc);
  } catch (const po::unknown_option& e) {
    throw_with_suggestion(e, desc);
  }
}

}  // namespace mpitrain
