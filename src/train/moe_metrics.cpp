#include "mpitrain/train/moe_metrics.hpp"

namespace mpitrain {

std::vector<MoeLayerRecord> reduce_moe_stats(const std::vector<MoeLayerStats>& mine,
                                             const ModelConfig& config, bool counts,
                                             int micro_batches, Communicator& world) {
  const size_t E = static_cast<size_t>(config.n_experts), width = E + 2;  // aux, z, tokens (E)
  std::vector<int> layers;  // the model's MoE layers; record i is layers[i]
  for (int l = 0; l < config.n_layer; ++l)
    if (config.is_moe_layer(l)) layers.push_back(l);
  std::vector<double> sums(layers.size() * width, 0.0);  // counts below 2^53: exact
  if (counts)
    for (const MoeLayerStats& s : mine) {
      const size_t i = static_cast<size_t>(config.moe_layers(0, s.layer));
      double* row = sums.data() + i * width;
      row[0] += s.aux_loss;
      row[1] += s.z_loss;
      for (size_t e = 0; e < E; ++e) row[2 + e] += static_cast<double>(s.tokens_per_expert[e]);
    }
  world.all_reduce(sums.data(), sums.size(), ReduceOp::Sum);
  std::vector<MoeLayerRecord> records(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const double* row = sums.data() + i * width;
    records[i].layer = layers[i];
    records[i].aux_loss = row[0] / micro_batches;
    records[i].z_loss = row[1] / micro_batches;
    records[i].tokens.resize(E);
    for (size_t e = 0; e < E; ++e) records[i].tokens[e] = static_cast<int64_t>(row[2 + e]);
  }
  return records;
}

}  // namespace mpitrain
