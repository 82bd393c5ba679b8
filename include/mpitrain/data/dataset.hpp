// The token files of a data spec (data_spec.hpp), opened, as sample spaces: one Corpus per blend
// component (one in all for an unweighted list) and the concatenation of every file.
//
// Memory per dataset: the open files (mappings, or an HDF5 handle) and a few words per file;
// nothing reads the tokens until a sample is asked for.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mpitrain/data/data_spec.hpp"
#include "mpitrain/data/samples.hpp"
#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

class Dataset {
 public:
  // Opens every file of the spec (UsageError as open_tokens and Corpus); `option` names the spec
  // in messages. Files that declare a vocabulary size or tokenizer must agree (UsageError).
  Dataset(const DataSpec& spec, TokenFormat format, int seq_len, const std::string& option);

  const std::vector<std::unique_ptr<TokenSource>>& files() const { return files_; }
  const TokenSource& first() const { return *files_.front(); }  // the vocabulary, tokenizer
  uint64_t tokens() const;                                      // summed over the files
  size_t components() const { return components_.size(); }
  const Corpus& component(size_t c) const { return components_[c]; }
  const std::vector<double>& weights() const { return weights_; }
  const Corpus& all() const { return all_; }  // every file in spec order (evaluation reads this)
  // How many of the files have a loss mask (TokenSource::has_loss_mask).
  size_t loss_masked_files() const;
  // The first file whose documents the boundary token does not mark
  // (TokenSource::documents_unmarked); null if none.
  const TokenSource* documents_unmarked() const;
  // Every file read()s without HDF5 calls (TokenSource::concurrent_reads); else the first that
  // does not, in `blocker`.
  bool concurrent_reads(std::string* blocker) const;
  // One line per file, "<weight> <tokens> <absolute path>" ("-" for the weight of an unweighted
  // list): what a checkpoint records (CheckpointManifest::data).
  std::string record() const;

 private:
  std::vector<std::unique_ptr<TokenSource>> files_;
  std::vector<Corpus> components_;
  std::vector<double> weights_;
  std::vector<std::string> file_weights_;  // per file, as recorded
  Corpus all_;
};

// How two Dataset::record texts differ ("" when they do not), naming the files:
// "web/a.bin: 1000 tokens in the checkpoint, 1200 now; b.h5: not in the checkpoint".
std::string data_differences(const std::string& checkpoint, const std::string& now);

}  // namespace mpitrain
