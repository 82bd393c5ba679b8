#include "mpitrain/train/generate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

void generate(Model<float>& model, std::vector<int32_t>& tokens, int n, int window,
              double temperature, Rng& rng) {
  const int V = model.config().vocab_size;
  std::vector<double> prob(V);
  for (int i = 0; i < n; ++i) {
    const int len = std::min<int>(window, static_cast<int>(tokens.size()));
    model.forward(0, tokens.data() + tokens.size() - len, nullptr, 1, len, 0.0f);
    const float* logits = model.logits_row(0, len - 1);
    const int best = static_cast<int>(std::max_element(logits, logits + V) - logits);
    int next = best;
    if (temperature > 0) {
      // p_v proportional to exp((logit_v - max) / temperature), drawn by inverse CDF.
      double total = 0;
      for (int v = 0; v < V; ++v) total += prob[v] = std::exp((logits[v] - logits[best]) / temperature);
      double u = rng.uniform() * total;
      next = V - 1;
      for (int v = 0; v < V; ++v) {
        if ((u -= prob[v]) < 0) {
          next = v;
          break;
        }
      }
    }
    tokens.push_back(next);
  }
}

void print_sample(const TrainConfig& t, const ModelConfig& cfg, const std::vector<float>& params,
                  const Tokenizer* tokenizer, Backend<float>& backend) {
  Model<float> model(cfg, backend, ModelShard{}, 1, t.seq_len);
  std::copy(params.begin(), params.end(), model.params());
  std::vector<int32_t> text;
  if (tokenizer) {
    for (uint32_t id : tokenizer->encode(t.sample_prompt.empty() ? "\n" : t.sample_prompt))
      text.push_back(static_cast<int32_t>(id));
  }
  if (text.empty()) text.push_back(0);
  const size_t prompt = text.size();
  Rng rng(t.seed, rng_stream::kSampling);
  generate(model, text, t.sample_tokens, t.seq_len, t.sample_temperature, rng);
  std::printf("---- sample (%d tokens, temperature %.2f) ----\n", t.sample_tokens,
              t.sample_temperature);
  if (tokenizer) {
    std::printf("%s%s\n", t.sample_prompt.c_str(),
                tokenizer->decode(text.data() + prompt, text.size() - prompt).c_str());
  } else {
    for (size_t i = prompt; i < text.size(); ++i) std::printf("%d ", text[i]);
    std::printf("\n");
  }
  std::printf("----\n");
  std::fflush(stdout);
}

}  // namespace mpitrain
