// The CheckpointState of an optimizer's buffers.
#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

CheckpointState checkpoint_state(const ModelConfig& config, const ParamLayout& layout,
                                 float* params, const ShardRanges& params_held,
                                 Optimizer& optimizer, bool writer) {
  return {config,
          layout,
          params,
          optimizer.owned().ranges().empty() ? 0 : optimizer.owned().ranges()[0].lo,
          optimizer.owned().ranges().empty() ? 0 : optimizer.owned().ranges()[0].hi,
          params_held,
          optimizer.master(),
          optimizer.config().kind,
          optimizer.state(),
          optimizer.precision(),
          writer};
}

}  // namespace mpitrain
