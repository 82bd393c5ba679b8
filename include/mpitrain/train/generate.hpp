// Text generation from a trained model: the short sample printed at the end of a run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/rng.hpp"
#include "mpitrain/train/train_config.hpp"

namespace mpitrain {

// Appends n tokens to `tokens`, each drawn from softmax(logits / temperature) of the model given
// the last `window` tokens (temperature 0 = the most likely token). No KV cache: each new token
// runs the whole window, which is fine for a short sample.
void generate(Model<float>& model, std::vector<int32_t>& tokens, int n, int window,
              double temperature, Rng& rng);

// The text sample printed at the end of a run: a single-rank copy of the whole model (params in
// the single-rank layout) continues the prompt (a newline if empty), encoded and decoded with the
// tokenizer; without one (nothing recorded for the data) it starts from token 0 and prints ids.
void print_sample(const TrainConfig& t, const ModelConfig& cfg, const std::vector<float>& params,
                  const Tokenizer* tokenizer, Backend<float>& backend);

}  // namespace mpitrain
