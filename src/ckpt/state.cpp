// The CheckpointState of an optimizer's buffers.
#include <utility>

#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

float* master_view(float* params, const ShardRanges& params_held, const ShardRanges& owned) {
  if (!params) return nullptr;
  const std::vector<FlatRange>& ranges = owned.ranges();
  size_t first = 0;  // the compact offset in params of the first owned element
  for (size_t i = 0; i < ranges.size(); ++i) {
    const ShardRanges::Overlap o = params_held.overlap(ranges[i].lo, ranges[i].hi);
    if (i == 0) first = o.at;
    if (o.size() != ranges[i].size() || o.at != first + owned.at(i)) return nullptr;
  }
  return params + first;
}

CheckpointState checkpoint_state(const ModelConfig& config, const ParamLayout& layout,
                                 float* params, ShardRanges params_held, Optimizer& optimizer,
                                 bool writer, bool expert_writer) {
  const float* view = master_view(params, params_held, optimizer.owned());
  return {config,
          layout,
          params,
          std::move(params_held),
          optimizer.owned(),
          optimizer.master(),
          !view || optimizer.master() != view,
          optimizer.config().kind,
          optimizer.state(),
          optimizer.precision(),
          writer,
          expert_writer};
}

}  // namespace mpitrain
