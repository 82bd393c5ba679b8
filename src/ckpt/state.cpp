// The CheckpointState of an optimizer's buffers.
#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

CheckpointState checkpoint_state(const ModelConfig& config, const ParamLayout& layout,
                                 float* params, Optimizer& optimizer, bool writer) {
  return {config,
          layout,
          params,
          optimizer.lo(),
          optimizer.hi(),
          optimizer.master(),
          optimizer.config().kind,
          optimizer.state(),
          optimizer.precision(),
          writer};
}

}  // namespace mpitrain
