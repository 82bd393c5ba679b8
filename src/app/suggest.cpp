#include "mpitrain/app/suggest.hpp"

#include <algorithm>
#include <cctype>

namespace mpitrain {

namespace {

constexpr int kMaxDistance = 2;

// The names users of nanoGPT, Hugging Face Trainer, Megatron-LM and torchtitan type for our
// options (normalised: '-' for '_', lower case), each with the option(s) it means here and, where
// the meaning differs, how to translate it.
struct ForeignName {
  std::string_view name;
  std::vector<std::string_view> ours;
  std::string_view note;
};
const std::vector<ForeignName>& foreign_names() {
  static const std::vector<ForeignName> names = {
      {"learning-rate", {"lr"}, ""},
      {"max-lr", {"lr"}, ""},
      {"max-iters", {"steps"}, ""},
      {"max-steps", {"steps"}, ""},
      {"train-iters", {"steps"}, ""},
      {"train-steps", {"steps"}, ""},
      {"num-train-steps", {"steps"}, ""},
      {"training-steps", {"steps"}, ""},
      {"warmup-iters", {"warmup-steps"}, ""},
      {"lr-warmup-iters", {"warmup-steps"}, ""},
      {"lr-warmup-steps", {"warmup-steps"}, ""},
      {"lr-decay-iters", {"lr-decay-steps"}, ""},
      {"decay-steps", {"lr-decay-steps"}, ""},
      {"lr-decay-style", {"lr-schedule"}, ""},
      {"lr-scheduler-type", {"lr-schedule"}, ""},
      {"lr-scheduler", {"lr-schedule"}, ""},
      {"min-lr", {"min-lr-ratio"}, "it is the final lr as a fraction of --lr"},
      {"batch-size", {"micro-batch-size", "global-batch-size"},
       "sequences per rank and forward, or per step over all ranks"},
      {"per-device-train-batch-size", {"micro-batch-size"}, ""},
      {"train-batch-size", {"global-batch-size"}, ""},
      {"global-batch", {"global-batch-size"}, ""},
      {"gradient-accumulation-steps", {"global-batch-size"},
       "it is micro-batch-size x accumulation steps x dp"},
      {"grad-accum-steps", {"global-batch-size"},
       "it is micro-batch-size x accumulation steps x dp"},
      {"seq-length", {"seq-len"}, ""},
      {"block-size", {"seq-len"}, ""},
      {"max-seq-length", {"seq-len"}, ""},
      {"sequence-length", {"seq-len"}, ""},
      {"max-position-embeddings", {"max-seq-len"}, ""},
      {"n-positions", {"max-seq-len"}, ""},
      {"window-size", {"sliding-window"}, ""},
      {"reset-attention-mask", {"document-mask"}, ""},
      {"reset-position-ids", {"document-positions"}, ""},
      {"eod-mask-loss", {"mask-boundary-loss"}, ""},
      {"num-layers", {"n-layer"}, ""},
      {"num-hidden-layers", {"n-layer"}, ""},
      {"n-layers", {"n-layer"}, ""},
      {"hidden-size", {"d-model"}, ""},
      {"n-embd", {"d-model"}, ""},
      {"dim", {"d-model"}, ""},
      {"num-attention-heads", {"n-head"}, ""},
      {"n-heads", {"n-head"}, ""},
      {"num-key-value-heads", {"n-kv-head"}, ""},
      {"num-query-groups", {"n-kv-head"}, ""},
      {"n-kv-heads", {"n-kv-head"}, ""},
      {"ffn-hidden-size", {"d-ff"}, ""},
      {"intermediate-size", {"d-ff"}, ""},
      {"adam-beta1", {"beta1"}, ""},
      {"adam-beta2", {"beta2"}, ""},
      {"adam-epsilon", {"adam-eps"}, ""},
      {"max-grad-norm", {"grad-clip"}, ""},
      {"clip-grad", {"grad-clip"}, ""},
      {"wd", {"weight-decay"}, ""},
      {"output-dir", {"out-dir"}, ""},
      {"save", {"out-dir"}, "checkpoints go to <out-dir>/checkpoints"},
      {"save-steps", {"save-interval"}, ""},
      {"checkpoint-interval", {"save-interval"}, ""},
      {"save-total-limit", {"keep-last"}, ""},
      {"load", {"resume"}, ""},
      {"resume-from-checkpoint", {"resume"}, ""},
      {"model-name-or-path", {"init-from"}, ""},
      {"data-path", {"train-data"},
       "Megatron's 'W1 PREFIX1 W2 PREFIX2' is written 'W1:PREFIX1,W2:PREFIX2'"},
      {"train-file", {"train-data"}, ""},
      {"dataset", {"train-data"}, ""},
      {"validation-file", {"val-data"}, ""},
      {"eval-steps", {"eval-interval"}, ""},
      {"eval-iters", {"eval-samples"}, "it counts sequences, not batches"},
      {"logging-steps", {"log-interval"}, ""},
      {"log-every", {"log-interval"}, ""},
      {"bf16", {"precision"}, "write --precision bf16"},
      {"fp16", {"precision"}, "write --precision fp16"},
      {"dtype", {"precision"}, ""},
      {"mixed-precision", {"precision"}, ""},
      {"gradient-checkpointing", {"recompute"}, "write --recompute full"},
      {"recompute-activations", {"recompute"}, "write --recompute selective"},
      {"activation-checkpointing", {"recompute"}, "write --recompute full"},
      {"tensor-model-parallel-size", {"tp"}, ""},
      {"pipeline-model-parallel-size", {"pp"}, ""},
      {"data-parallel-size", {"dp"}, ""},
      {"tensor-parallel-degree", {"tp"}, ""},
      {"pipeline-parallel-degree", {"pp"}, ""},
      {"data-parallel-shard-degree", {"zero-shard-size"}, "with --zero 2 or 3"},
      {"zero-stage", {"zero"}, ""},
      {"context-parallel-size", {"cp"}, ""},
      {"context-parallel-degree", {"cp"}, ""},
  };
  return names;
}

bool known(std::string_view name, const boost::program_options::options_description& desc) {
  for (const auto& option : desc.options())
    if (option->long_name() == name) return true;
  return false;
}

std::string_view without_dashes(std::string_view name) {
  return name.substr(std::min(name.find_first_not_of('-'), name.size()));
}

// How people miswrite option names without meaning another one: case and '_' for '-'.
std::string normalised(std::string_view name) {
  std::string out(without_dashes(name));
  for (char& c : out) c = c == '_' ? '-' : static_cast<char>(std::tolower(c));
  return out;
}

// The entry of foreign_names() for `wanted` (normalised) whose options desc all has, else null.
const ForeignName* foreign_name(const std::string& wanted,
                                const boost::program_options::options_description& desc) {
  for (const ForeignName& f : foreign_names())
    if (f.name == wanted &&
        std::all_of(f.ours.begin(), f.ours.end(), [&](auto o) { return known(o, desc); }))
      return &f;
  return nullptr;
}

}  // namespace

int edit_distance(std::string_view a, std::string_view b) {
  // d[i][j]: distance between the first i characters of a and the first j of b.
  std::vector<std::vector<int>> d(a.size() + 1, std::vector<int>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = static_cast<int>(i);
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const int substitution = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, substitution});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::vector<std::string> nearest_options(std::string_view given,
                                         const boost::program_options::options_description& desc) {
  const std::string wanted = normalised(given);
  if (const ForeignName* foreign = foreign_name(wanted, desc))
    return std::vector<std::string>(foreign->ours.begin(), foreign->ours.end());
  int best = std::min(kMaxDistance, static_cast<int>(wanted.size()) / 2);
  std::vector<std::string> nearest;
  for (const auto& option : desc.options()) {
    const std::string& name = option->long_name();
    const int distance = edit_distance(wanted, name);
    if (name.empty() || distance > best) continue;
    if (distance < best) nearest.clear();
    best = distance;
    nearest.push_back(name);
  }
  return nearest;
}

std::string did_you_mean(std::string_view given,
                         const boost::program_options::options_description& desc) {
  const std::vector<std::string> names = nearest_options(given, desc);
  if (names.empty()) return "";
  const std::string dashes(given.substr(0, given.size() - without_dashes(given).size()));
  std::string text = " (did you mean ";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + dashes + names[i];
  text += '?';
  const ForeignName* foreign = foreign_name(normalised(given), desc);
  if (foreign && !foreign->note.empty()) text.append(" ").append(foreign->note);
  return text + ")";
}

}  // namespace mpitrain
