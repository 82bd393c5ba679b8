#include "mpitrain/train/generate.hpp"

#include <algorithm>
#include <cmath>

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

}  // namespace mpitrain
