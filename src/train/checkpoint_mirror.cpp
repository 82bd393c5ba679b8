#include "mpitrain/train/checkpoint_mirror.hpp"

namespace mpitrain {

size_t mirror_floats(const CheckpointState& device, MirrorUse use) {
  const size_t owned = device.owned.size(), buffers = device.state.size();
  if (use == MirrorUse::Save) return device.writer ? owned * (1 + buffers) : 0;
  return device.params_held.size() + (device.separate_master ? owned : 0) + owned * buffers;
}

CheckpointMirror::CheckpointMirror(Backend<float>& backend, const CheckpointState& device,
                                   Buf<float> params, MirrorUse use)
    : backend_(backend), host_(device) {
  const size_t n = device.owned.size();
  if (use == MirrorUse::Save) {  // the master (a view of the fp32 params, or its own) and state
    host_.params = nullptr;
    host_.master = device.writer ? mirror(device.master, n) : nullptr;
    for (float*& b : host_.state) b = device.writer ? mirror(b, n) : nullptr;
    return;
  }
  host_.params = mirror(params, device.params_held.size());
  host_.master = device.separate_master
                     ? mirror(device.master, n)
                     : master_view(host_.params, device.params_held, device.owned);
  for (float*& b : host_.state) b = mirror(b, n);
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
