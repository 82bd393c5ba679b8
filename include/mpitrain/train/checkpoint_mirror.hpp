// Host copies of the buffers a checkpoint reads and writes when they live on a device: the state
// points at the copies; download() before a save, upload() after a load.
#pragma once

#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

class CheckpointMirror {
 public:
  // Re-points state's params, master and optimizer buffers at host copies (the master stays a
  // view into params where it is one).
  CheckpointMirror(Backend<float>& backend, CheckpointState& state);
  void download();  // device -> the copies
  void upload();    // the copies -> device

 private:
  struct Buffer {
    float* device;
    std::vector<float> host;
  };
  void mirror(float*& p, size_t n);

  Backend<float>& backend_;
  std::vector<Buffer> buffers_;
};

}  // namespace mpitrain
