// Which tokenizer the sample encodes and decodes with, and the descriptor that the run directory
// keeps a copy of (<out-dir>/tokenizer/), so that sampling from its checkpoints finds it.
#pragma once

#include <memory>
#include <string>

#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

inline constexpr const char* kRunTokenizerDir = "tokenizer";  // in a run directory

struct SampleTokenizer {
  std::unique_ptr<Tokenizer> tokenizer;  // null: none known (the sample prints ids)
  std::string descriptor;                // where it was read from; "" = no descriptor file
};

// The first known of: --tokenizer PATH (given), the training data's recorded tokenizer, the
// resumed run's <run_dir>/tokenizer/, the validation data's. train, val: null when absent;
// run_dir: "" when not resuming another run. UsageError for a descriptor that cannot be read.
SampleTokenizer choose_sample_tokenizer(const std::string& given, const TokenSource* train,
                                        const std::string& run_dir, const TokenSource* val);

// Copies descriptor and its files into dir (data/tokenizer.hpp copy_tokenizer) unless it is
// already there (the run's own tokenizer/ given back as --tokenizer).
void keep_tokenizer(const std::string& descriptor, const std::string& dir);

}  // namespace mpitrain
