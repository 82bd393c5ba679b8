// Host copies of the buffers a checkpoint reads and writes when they live on a device: the
// backend's alloc_host memory (pinned on a GPU), made only for what needs them:
//   Save  on a writer, the master and each optimizer buffer over its owned ranges, all that a
//         save writes (download() before each save); nothing on the other ranks. Also the
//         staging buffer of a save in the background (train/checkpointer.hpp), which makes it,
//         at set-up where saves are planned, else at a stop's save.
//   Load  on every rank, what it loads: the params it holds, a separate master and the optimizer
//         state over its owned ranges (upload() after the load); made by a resume, freed after it.
// ~16 bytes a parameter for a load in bf16 with Adam (params, master, m, v), 12 for a writer's
// save: mirror_floats says how many floats, for the host memory checks.
#pragma once

#include <memory>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"

namespace mpitrain {

enum class MirrorUse { Save, Load };

// Floats of the host copies of `device` (a rank's state on the device) that `use` needs.
size_t mirror_floats(const CheckpointState& device, MirrorUse use);

class CheckpointMirror {
 public:
  // The copies of device's buffers that `use` needs. params: the compute copy device.params
  // stands for, whose host copy (a load's) is fp32 whatever its storage type (converted).
  CheckpointMirror(Backend<float>& backend, const CheckpointState& device, Buf<float> params,
                   MirrorUse use);
  CheckpointState& host() { return host_; }  // device's state over the copies (null: none)
  void download();                           // device -> the copies
  void upload();                             // the copies -> device

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
  CheckpointState host_;
  std::vector<Buffer> buffers_;
};

}  // namespace mpitrain
