// The value of --train-data / --val-data: a comma-separated list of entries [WEIGHT:]PATH_OR_GLOB.
//
//   train.h5                        one file
//   shards/fw_train_*.bin,extra.h5  files and globs (glob(3), each sorted), concatenated
//   0.7:web/*.bin, 0.3:code.h5      a blend: every entry weighted, weights normalised
//
// Spaces around entries are ignored, so the list reads well in an INI file. A path without a
// glob character is kept as given (opening it reports a missing file).
#pragma once

#include <string>
#include <vector>

namespace mpitrain {

struct DataEntry {
  std::string pattern;             // as given
  double weight = 1.0;             // normalised over the spec's entries (1 when unweighted)
  std::vector<std::string> files;  // what the pattern names, sorted
};

struct DataSpec {
  std::vector<DataEntry> entries;  // in the order given
  bool weighted = false;           // every entry has a weight (else none has)
};

// UsageError naming `option` and the entry for an empty entry, a weight that is not a positive
// number, weighted and unweighted entries mixed, a glob that matches nothing.
DataSpec parse_data_spec(const std::string& value, const std::string& option);

}  // namespace mpitrain
