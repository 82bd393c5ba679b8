#include "mpitrain/train/checkpoint_mirror.hpp"

namespace mpitrain {

CheckpointMirror::CheckpointMirror(Backend<float>& backend, CheckpointState& state,
                                   Buf<float> params)
    : backend_(backend) {
  const bool separate_master = !params.full() || state.master != params.full() + state.lo;
  const size_t n = state.hi - state.lo;
  state.params = mirror(params, state.layout.total());
  state.master = separate_master ? mirror(state.master, n) : state.params + state.lo;
  for (float*& b : state.state) b = mirror(b, n);
}

void CheckpointMirror::download() {
  for (Buffer& b : buffers_) backend_.download(b.host.data(), b.device, b.host.size());
}

void CheckpointMirror::upload() {
  for (Buffer& b : buffers_) backend_.upload(b.device, b.host.data(), b.host.size());
}

float* CheckpointMirror::mirror(Buf<float> device, size_t n) {
  buffers_.push_back({device, std::vector<float>(n)});
  return buffers_.back().host.data();  // a vector's storage stays put when the vector moves
}

}  // namespace mpitrain
