// Command-line and INI options (Boost.Program_options). Flags override the INI file given by
// --config; in the file, the same names without the leading dashes. Every option has a default,
// listed by --help.
#pragma once

#include <string>
#include <vector>

#include "mpitrain/model/config.hpp"
#include "mpitrain/train/train_config.hpp"

namespace mpitrain {

struct Options {
  ModelConfig model;
  TrainConfig train;
  bool help = false;
  std::string help_text;                 // filled when help is asked for
  std::vector<std::string> model_set;    // model options the user set (flag or file)
  std::string effective;                 // every option's final value, INI syntax
};

// Parses and checks ranges; throws UsageError with one clear message. Model fields left at 0
// (vocab-size, d-ff, n-kv-head, max-seq-len) are resolved later from the data or the model file.
Options parse_options(int argc, const char* const* argv);

}  // namespace mpitrain
