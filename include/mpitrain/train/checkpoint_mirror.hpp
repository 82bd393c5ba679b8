// Host copies of the buffers a checkpoint reads and writes when they live on a device: the state
// points at the copies; download() before a save, upload() after a load. The copies are the
// backend's alloc_host memory (pinned on a GPU), and the staging buffer of a save in the
// background (train/checkpointer.hpp): only saves and loads touch them.
#pragma once

#include <memory>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

class CheckpointMirror {
 public:
  // Re-points state's params, master and optimizer buffers at host copies of their sizes
  // (params_held, owned), the master staying a view into params where it is one. params: the
  // compute copy state.params stands for, whose host copy is fp32 whatever its storage type
  // (converted both ways).
  CheckpointMirror(Backend<float>& backend, CheckpointState& state, Buf<float> params);
  void download();  // device -> the copies
  void upload();    // the copies -> device

 private:
  struct FreeHost {
    Backend<float>* backend;
    void operator()(float* p) const { backend->free_host(p); }
  };
  struct Buffer {
    Buf<float> device;
    std::unique_ptr<float, FreeHost> host;
    size_t n;
  };
  float* mirror(Buf<float> device, size_t n);  // the host copy

  Backend<float>& backend_;
  std::vector<Buffer> buffers_;
};

}  // namespace mpitrain
