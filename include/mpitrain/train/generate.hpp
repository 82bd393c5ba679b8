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

// How the next token is drawn from the logits, in Hugging Face's order: the distribution
// softmax(logits / temperature), cut to its top_k most likely tokens (0 = all), of them the
// fewest most likely whose probabilities (renormalised over those k) sum to at least top_p
// (1 = all), and one of those drawn; temperature 0 = the most likely token (greedy). Ties rank
// the lower id first.
struct SamplingConfig {
  double temperature = 0.0;
  int top_k = 0;
  double top_p = 1.0;
};

SamplingConfig sampling_config(const TrainConfig& t);

// Weights proportional to the probability with which each of the V tokens is drawn (temperature
// > 0): exp((logit - max logit) / temperature) for the tokens the filters keep, 0 for the rest.
void sampling_weights(const float* logits, int V, const SamplingConfig& c,
                      std::vector<double>& weights);

// The next token under c (rng is used only when temperature > 0): inverse CDF over
// sampling_weights in id order.
int sample_token(const float* logits, int V, const SamplingConfig& c, Rng& rng,
                 std::vector<double>& weights);

// Appends n tokens to `tokens`, each drawn by sample_token from the model's logits given the last
// `window` tokens. No KV cache: each new token runs the whole window, fine for a short sample.
void generate(Model<float>& model, std::vector<int32_t>& tokens, int n, int window,
              const SamplingConfig& c, Rng& rng);

// The prompt's ids under the tokenizer (a newline when the prompt is empty); token 0 alone when
// there is no tokenizer and no prompt. UsageError when a prompt is given without a tokenizer, or
// an id is not below vocab_size: checked at start-up, before any work.
std::vector<int32_t> prompt_tokens(const std::string& prompt, const Tokenizer* tokenizer,
                                   int vocab_size);

// The text sample printed at the end of a run: a single-rank copy of the whole model (params in
// the single-rank layout) continues the prompt, encoded and decoded with the tokenizer; without
// one (nothing recorded for the data, no --tokenizer) it prints ids and says so in one line.
void print_sample(const TrainConfig& t, const ModelConfig& cfg, const std::vector<float>& params,
                  const Tokenizer* tokenizer, Backend<float>& backend);

}  // namespace mpitrain
