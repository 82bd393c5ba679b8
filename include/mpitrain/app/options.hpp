// Command-line and INI options (Boost.Program_options). Flags override the INI file given by
// --config; in the file, the same names without the leading dashes. Every option has a default,
// listed by --help (app/help_format.hpp); an unknown name gets the nearest known ones
// (app/suggest.hpp).
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "mpitrain/app/option_ranges.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/train_config.hpp"

namespace mpitrain {

struct Options {
  ModelConfig model;
  TrainConfig train;
  std::string print_instead;           // --help or --version: rank 0 prints this, exit 0
  std::vector<std::string> given;      // the options the user set (flag or file)
  std::string effective;               // every option's final value, INI syntax
  bool was_given(const std::string& name) const {
    return std::find(given.begin(), given.end(), name) != given.end();
  }
  // Given, and to other than its default: what a run must use (run.ini, which repeats a run as
  // --config, gives every option, most at their defaults).
  template <class V>
  bool changed(const std::string& name, const V& value, const V& default_value) const {
    return was_given(name) && value != default_value;
  }
  // UsageError "<name><why>" for an option changed that the run would not use (!used).
  template <class V>
  void require_used(bool used, const std::string& name, const V& value, const V& default_value,
                    const std::string& why) const {
    require(used || !changed(name, value, default_value), name + why);
  }
};

// The valid range of each numeric option (app/option_ranges.hpp): --help shows them,
// parse_options checks them.
const std::vector<OptionRange>& trainer_option_ranges();

// Parses and checks ranges; throws UsageError with one clear message. Model fields left at 0
// (vocab-size, d-ff, n-kv-head, max-seq-len) are resolved later from the data or the model file.
Options parse_options(int argc, const char* const* argv);

}  // namespace mpitrain
