// Training a SentencePiece model on the user's text (prepare-data --tokenizer sentencepiece).
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "mpitrain/data/sentencepiece_tokenizer.hpp"
#include "mpitrain/io/durable.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// The lines of texts, one sentence each (the trainer learns from sentences).
class LineIterator final : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(const std::vector<std::string>& texts) : texts_(texts) { Next(); }
  bool done() const override { return text_ >= texts_.size(); }
  void Next() override {
    while (text_ < texts_.size()) {
      const std::string& t = texts_[text_];
      if (pos_ < t.size()) {
        const size_t end = std::min(t.find('\n', pos_), t.size());
        line_.assign(t, pos_, end - pos_);
        pos_ = end + 1;
        return;
      }
      ++text_;
      pos_ = 0;
    }
  }
  const std::string& value() const override { return line_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& texts_;
  size_t text_ = 0, pos_ = 0;
  std::string line_;
};

}  // namespace

void train_sentencepiece(const std::vector<std::string>& texts, int vocab_size,
                         const std::string& model_type, const std::string& model_file) {
  const std::unordered_map<std::string, std::string> args = {
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", model_type},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"minloglevel", "1"},  // the library's progress log would bury prepare-data's own lines
  };
  LineIterator lines(texts);
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, &lines, &model);
  require(status.ok(), "SentencePiece cannot train a " + model_type + " model of " +
                           std::to_string(vocab_size) +
                           " pieces on this text: " + status.ToString());
  write_file_synced(model_file, model);
}

}  // namespace mpitrain
