#include "mpitrain/train/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// The ids the top-k and top-p filters keep, most likely first (all V unfiltered, in id order);
// temperature > 0.
std::vector<int> kept_tokens(const float* logits, int V, const SamplingConfig& c) {
  std::vector<int> ids(V);
  std::iota(ids.begin(), ids.end(), 0);
  if (c.top_k <= 0 && c.top_p >= 1) return ids;
  const int k = c.top_k > 0 ? std::min(c.top_k, V) : V;
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  ids.resize(k);
  if (c.top_p >= 1) return ids;
  // The nucleus of the tempered distribution softmax(logits / temperature) over the k.
  const double top = logits[ids[0]];
  const auto tempered = [&](int id) {
    return std::exp((static_cast<double>(logits[id]) - top) / c.temperature);
  };
  double z = 0;
  for (int id : ids) z += tempered(id);
  double mass = 0;
  size_t n = 0;
  while (n < ids.size() && mass < c.top_p) mass += tempered(ids[n++]) / z;
  ids.resize(std::max<size_t>(n, 1));
  return ids;
}

}  // namespace

SamplingConfig sampling_config(const TrainConfig& t) {
  return {t.sample_temperature, t.sample_top_k, t.sample_top_p};
}

void sampling_weights(const float* logits, int V, const SamplingConfig& c,
                      std::vector<double>& weights) {
  weights.assign(V, 0.0);
  const std::vector<int> kept = kept_tokens(logits, V, c);
  const float top = *std::max_element(logits, logits + V);
  for (int v : kept) weights[v] = std::exp((logits[v] - top) / c.temperature);
}

int sample_token(const float* logits, int V, const SamplingConfig& c, Rng& rng,
                 std::vector<double>& weights) {
  if (c.temperature <= 0) return static_cast<int>(std::max_element(logits, logits + V) - logits);
  sampling_weights(logits, V, c, weights);
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  double u = rng.uniform() * total;
  int last = 0;  // the last token kept: where rounding leaves u at the very end
  for (int v = 0; v < V; ++v) {
    if (weights[v] == 0) continue;
    if ((u -= weights[v]) < 0) return v;
    last = v;
  }
  return last;
}

void generate(Model<float>& model, std::vector<int32_t>& tokens, int n, int window,
              const SamplingConfig& c, Rng& rng) {
  const int V = model.config().vocab_size;
  std::vector<double> weights(V);
  std::vector<float> logits(V);  // the last row's, as fp32 on the host
  for (int i = 0; i < n; ++i) {
    const int len = std::min<int>(window, static_cast<int>(tokens.size()));
    model.forward(0, tokens.data() + tokens.size() - len, nullptr, 1, len, 0.0f);
    model.backend().download(logits.data(), model.logits_row(0, len - 1), logits.size());
    tokens.push_back(sample_token(logits.data(), V, c, rng, weights));
  }
}

std::vector<int32_t> prompt_tokens(const std::string& prompt, const Tokenizer* tokenizer,
                                   int vocab_size) {
  require(tokenizer || prompt.empty(),
          "sample-prompt: no tokenizer is known for this model to encode it (the data records "
          "none): give --tokenizer PATH (a tokenizer.json), or no prompt");
  std::vector<int32_t> ids;
  if (tokenizer)
    for (uint32_t id : tokenizer->encode(prompt.empty() ? "\n" : prompt)) {
      require(id < static_cast<uint32_t>(vocab_size),
              "sample-prompt: the " + tokenizer->name() + " tokenizer encodes it with token id " +
                  std::to_string(id) + ", not below the model's vocab-size " +
                  std::to_string(vocab_size));
      ids.push_back(static_cast<int32_t>(id));
    }
  if (ids.empty()) ids.push_back(0);
  return ids;
}

void print_sample(const TrainConfig& t, const ModelConfig& cfg, const std::vector<float>& params,
                  const Tokenizer* tokenizer, Backend<float>& backend) {
  Model<float> model(cfg, backend, ModelShard{}, 1, t.seq_len);
  backend.upload(model.params(), params.data(), params.size());
  std::vector<int32_t> text = prompt_tokens(t.sample_prompt, tokenizer, cfg.vocab_size);
  const size_t prompt = text.size();
  Rng rng(t.seed, rng_stream::kSampling);
  generate(model, text, t.sample_tokens, t.seq_len, sampling_config(t), rng);
  char how[96];  // temperature 0: the most likely token, top-k and top-p unused
  if (t.sample_temperature == 0)
    std::snprintf(how, sizeof how, "greedy: temperature 0");
  else
    std::snprintf(how, sizeof how, "temperature %.2f, top-k %d, top-p %.2f", t.sample_temperature,
                  t.sample_top_k, t.sample_top_p);
  std::printf("---- sample (%d tokens, %s) ----\n", t.sample_tokens, how);
  if (tokenizer) {
    std::printf("%s%s\n", t.sample_prompt.c_str(),
                tokenizer->decode(text.data() + prompt, text.size() - prompt).c_str());
  } else {
    std::printf("(token ids: no tokenizer is known for this model; --tokenizer PATH gives one)\n");
    for (size_t i = prompt; i < text.size(); ++i) std::printf("%d ", text[i]);
    std::printf("\n");
  }
  std::printf("----\n");
  std::fflush(stdout);
}

}  // namespace mpitrain
