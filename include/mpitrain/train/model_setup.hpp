// The model's final shape: options, completed from the training data and the init file.
#pragma once

#include "mpitrain/app/options.hpp"
#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

// Fills what options left at 0: vocab-size from the data's declared vocab_size, n-kv-head =
// n-head, d-ff by the architecture's rule, max-seq-len = seq-len. With init-from, the llm.c
// file's header is the shape, and a model option the user set that disagrees is a UsageError.
ModelConfig resolve_model_config(const Options& options, const TokenSource& train_data);

}  // namespace mpitrain
