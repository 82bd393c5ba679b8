#include "mpitrain/train/checkpoint_mirror.hpp"

namespace mpitrain {

CheckpointMirror::CheckpointMirror(Backend<float>& backend, CheckpointState& state)
    : backend_(backend) {
  const bool separate_master = state.master != state.params + state.lo;
  const size_t n = state.hi - state.lo;
  mirror(state.params, state.layout.total());
  if (separate_master)
    mirror(state.master, n);
  else
    state.master = state.params + state.lo;
  for (float*& b : state.state) mirror(b, n);
}

void CheckpointMirror::download() {
  for (Buffer& b : buffers_) backend_.download(b.host.data(), b.device, b.host.size());
}

void CheckpointMirror::upload() {
  for (Buffer& b : buffers_) backend_.upload(b.device, b.host.data(), b.host.size());
}

void CheckpointMirror::mirror(float*& p, size_t n) {
  buffers_.push_back({p, std::vector<float>(n)});
  p = buffers_.back().host.data();  // a vector's storage stays put when the vector moves
}

}  // namespace mpitrain
