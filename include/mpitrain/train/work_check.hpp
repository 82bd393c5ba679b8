// What a run is asked to do, checked at start-up so that nothing fails at the end: an evaluation
// or sample from a checkpoint, the sample's filters and prompt, the exports.
#pragma once

#include <string>

#include "mpitrain/app/options.hpp"
#include "mpitrain/ckpt/resume_source.hpp"
#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

// UsageError for: --steps 0 with nothing to evaluate, sample or export; --steps N below the step
// of the explicit --resume checkpoint `resumed` (null: none); a top-k beyond the vocabulary; a
// prompt that does not encode under `tokenizer` (train/generate.hpp prompt_tokens); --save-best
// without validation data; two exports into one file.
void check_work(const Options& o, const ModelConfig& cfg, const Tokenizer* tokenizer,
                const ResumeSource* resumed);

// Whether out_dir is the directory run_dir ("" never is).
bool is_run_dir(const std::string& run_dir, const std::string& out_dir);

}  // namespace mpitrain
