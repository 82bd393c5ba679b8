#include "mpitrain/train/sample_tokenizer.hpp"

#include <filesystem>

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

SampleTokenizer recorded(const TokenSource& src) {
  return {recorded_tokenizer(src), tokenizer_descriptor_of(src.path())};
}

}  // namespace

SampleTokenizer choose_sample_tokenizer(const std::string& given, const TokenSource* train,
                                        const std::string& run_dir, const TokenSource* val) {
  if (!given.empty()) return {load_tokenizer(given), given};
  if (train) return recorded(*train);
  const fs::path kept = fs::path(run_dir) / kRunTokenizerDir / kTokenizerFile;
  std::error_code ec;
  if (!run_dir.empty() && fs::is_regular_file(kept, ec))
    return {load_tokenizer(kept.string()), kept.string()};
  if (val) return recorded(*val);
  return {};
}

void keep_tokenizer(const std::string& descriptor, const std::string& dir) {
  const fs::path from =
      fs::is_directory(descriptor) ? fs::path(descriptor) : fs::path(descriptor).parent_path();
  std::error_code ec;
  if (!fs::equivalent(from.empty() ? "." : from, dir, ec)) copy_tokenizer(descriptor, dir);
}

}  // namespace mpitrain
