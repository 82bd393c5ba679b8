#include "mpitrain/data/dataset.hpp"

#include <algorithm>
#include <filesystem>
#include <map>
#include <sstream>

#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr size_t kMaxComponents = 256;  // each has its own Rng streams (rng_stream::kBlendOrder)

std::vector<std::unique_ptr<TokenSource>> open_all(const DataSpec& spec, TokenFormat format) {
  std::vector<std::unique_ptr<TokenSource>> files;
  for (const DataEntry& e : spec.entries)
    for (const std::string& path : e.files) files.push_back(open_tokens(path, format));
  return files;
}

std::vector<const TokenSource*> pointers(const std::vector<std::unique_ptr<TokenSource>>& files,
                                         size_t begin, size_t end) {
  std::vector<const TokenSource*> out;
  for (size_t i = begin; i < end; ++i) out.push_back(files[i].get());
  return out;
}

// UsageError unless every file that declares a vocabulary size (tokenizer) declares the same.
void require_one_vocabulary(const std::vector<std::unique_ptr<TokenSource>>& files,
                            const std::string& option) {
  const TokenSource* vocab = nullptr;
  const TokenSource* tok = nullptr;
  for (const auto& f : files) {
    if (f->vocab_size() > 0 && !vocab) vocab = f.get();
    if (!f->tokenizer().empty() && !tok) tok = f.get();
    if (f->vocab_size() > 0 && f->vocab_size() != vocab->vocab_size())
      throw UsageError("--" + option + ": " + f->path() + " declares vocab_size " +
                       std::to_string(f->vocab_size()) + ", " + vocab->path() + " " +
                       std::to_string(vocab->vocab_size()) +
                       ": the files must share one vocabulary");
    if (!f->tokenizer().empty() && f->tokenizer() != tok->tokenizer())
      throw UsageError("--" + option + ": " + f->path() + " was made by tokenizer " +
                       f->tokenizer() + ", " + tok->path() + " by " + tok->tokenizer() +
                       ": the files must share one tokenizer");
  }
}

struct RecordedFile {
  std::string weight, tokens;
};

// path -> (weight, tokens) of a record text, and the paths in order.
std::map<std::string, RecordedFile> parse_record(const std::string& text,
                                                 std::vector<std::string>* order) {
  std::map<std::string, RecordedFile> files;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    RecordedFile f;
    std::string path;
    fields >> f.weight >> f.tokens;
    std::getline(fields >> std::ws, path);
    files[path] = f;
    order->push_back(path);
  }
  return files;
}

}  // namespace

Dataset::Dataset(const DataSpec& spec, TokenFormat format, int seq_len, const std::string& option)
    : files_(open_all(spec, format)),
      all_((require_one_vocabulary(files_, option), pointers(files_, 0, files_.size())), seq_len) {
  require(spec.entries.size() <= kMaxComponents || !spec.weighted,
          "--" + option + ": " + std::to_string(spec.entries.size()) +
              " weighted entries; a blend takes at most " + std::to_string(kMaxComponents));
  size_t begin = 0;
  for (const DataEntry& e : spec.entries) {
    for (size_t i = 0; i < e.files.size(); ++i)
      file_weights_.push_back(spec.weighted ? shortest_text(e.weight) : "-");
    if (spec.weighted) {
      components_.emplace_back(pointers(files_, begin, begin + e.files.size()), seq_len);
      weights_.push_back(e.weight);
    }
    begin += e.files.size();
  }
  if (!spec.weighted) {
    components_.push_back(all_);
    weights_.push_back(1.0);
  }
}

uint64_t Dataset::tokens() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->size();
  return n;
}

size_t Dataset::loss_masked_files() const {
  return static_cast<size_t>(std::count_if(files_.begin(), files_.end(),
                                           [](const auto& f) { return f->has_loss_mask(); }));
}

const TokenSource* Dataset::documents_unmarked() const {
  for (const auto& f : files_)
    if (f->documents_unmarked()) return f.get();
  return nullptr;
}

bool Dataset::concurrent_reads(std::string* blocker) const {
  for (const auto& f : files_)
    if (!f->concurrent_reads()) {
      *blocker = f->path();
      return false;
    }
  return true;
}

std::string Dataset::record() const {
  std::string text;
  for (size_t i = 0; i < files_.size(); ++i) {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(files_[i]->path(), ec);
    text += file_weights_[i] + " " + std::to_string(files_[i]->size()) + " ";
    text += (ec ? files_[i]->path() : abs.lexically_normal().string()) + "\n";
  }
  return text;
}

std::string data_differences(const std::string& checkpoint, const std::string& now) {
  if (checkpoint == now) return "";
  std::vector<std::string> old_order, new_order;
  const auto before = parse_record(checkpoint, &old_order);
  const auto after = parse_record(now, &new_order);
  std::string diff;
  const auto note = [&](const std::string& path, const std::string& what) {
    if (!diff.empty()) diff += "; ";
    diff += path + ": " + what;
  };
  for (const std::string& path : old_order) {
    const auto it = after.find(path);
    const RecordedFile& was = before.at(path);
    if (it == after.end()) {
      note(path, "in the checkpoint, not in this run's data");
      continue;
    }
    if (was.tokens != it->second.tokens)
      note(path, was.tokens + " tokens in the checkpoint, " + it->second.tokens + " now");
    if (was.weight != it->second.weight)
      note(path, "weight " + was.weight + " in the checkpoint, " + it->second.weight + " now");
  }
  for (const std::string& path : new_order)
    if (!before.count(path)) note(path, "not in the checkpoint");
  return diff.empty() ? "the same files in another order" : diff;
}

}  // namespace mpitrain
