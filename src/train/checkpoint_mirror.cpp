#include "mpitrain/train/checkpoint_mirror.hpp"

namespace mpitrain {

CheckpointMirror::CheckpointMirror(Backend<float>& backend, CheckpointState& state,
                                   Buf<float> params)
    : backend_(backend) {
  const size_t n = state.owned.size();
  state.params = mirror(params, state.params_held.size());
  state.master = state.separate_master ? mirror(state.master, n)
                                       : master_view(state.params, state.params_held, state.owned);
  for (float*& b : state.state) b = mirror(b, n);
}

void CheckpointMirror::download() {
  for (Buffer& b : buffers_) backend_.download(b.host.get(), b.device, b.n);
}

void CheckpointMirror::upload() {
  for (Buffer& b : buffers_) backend_.upload(b.device, b.host.get(), b.n);
}

float* CheckpointMirror::mirror(Buf<float> device, size_t n) {
  buffers_.push_back({device, {backend_.alloc_host(n), FreeHost{&backend_}}, n});
  return buffers_.back().host.get();  // the storage stays put when the Buffer moves
}

}  // namespace mpitrain
