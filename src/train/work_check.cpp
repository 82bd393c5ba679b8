#include "mpitrain/train/work_check.hpp"

#include <filesystem>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/generate.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

void check_work(const Options& o, const ModelConfig& cfg, const Tokenizer* tokenizer,
                const ResumeSource* resumed) {
  const TrainConfig& t = o.train;
  const bool exports = !t.export_llmc.empty() || !t.export_params.empty() || !t.export_hf.empty();
  require(t.steps > 0 || !t.val_data.empty() || t.sample_tokens > 0 || exports,
          "--steps 0 trains nothing, and nothing else is asked: give --val-data to evaluate, "
          "--sample-tokens N to sample, or an --export-* option");
  if (resumed) {
    const std::string at = std::to_string(resumed->manifest.step);
    require(t.steps == 0 || t.steps >= resumed->manifest.step,
            "steps " + std::to_string(t.steps) + ": the checkpoint " + t.resume + " is at step " +
                at + " already; --steps 0 evaluates or samples it, --steps " + "above " + at +
                " trains on");
  }
  require(t.sample_top_k <= cfg.vocab_size, "sample-top-k " + std::to_string(t.sample_top_k) +
                                                " exceeds the vocabulary (" +
                                                std::to_string(cfg.vocab_size) + " tokens)");
  if (t.sample_tokens > 0) prompt_tokens(t.sample_prompt, tokenizer, cfg.vocab_size);
  require(!t.save_best || !t.val_data.empty(),
          "save-best keeps the checkpoint of the lowest validation loss: it needs val-data");
  require(t.export_llmc.empty() || t.export_llmc != t.export_params,
          "export-llmc and export-params name the same file " + t.export_llmc +
              ": one would "
              "overwrite the other");
}

bool is_run_dir(const std::string& run_dir, const std::string& out_dir) {
  std::error_code ec;
  return !run_dir.empty() && fs::equivalent(run_dir, out_dir, ec);
}

}  // namespace mpitrain
