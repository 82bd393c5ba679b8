#include "mpitrain/optim/adamw.hpp"

namespace mpitrain {

template <typename T>
AdamW<T>::AdamW(Backend<T>& backend, const ParamLayout& layout, const AdamWConfig& config)
    : backend_(backend), layout_(layout), config_(config) {
  m_ = backend_.alloc(layout_.total());
  v_ = backend_.alloc(layout_.total());
}

template <typename T>
AdamW<T>::~AdamW() {
  backend_.free(v_);
  backend_.free(m_);
}

template <typename T>
void AdamW<T>::step(T* params, const T* grads, float lr, float grad_scale) {
  ++t_;
  for (const ParamTensor& t : layout_.tensors()) {
    const float wd = t.decay ? config_.weight_decay : 0.0f;
    backend_.adamw(params + t.offset, grads + t.offset, m_ + t.offset, v_ + t.offset, t.numel, lr,
                   config_.beta1, config_.beta2, config_.eps, wd, t_, grad_scale);
  }
}

template class AdamW<float>;
template class AdamW<double>;

}  // namespace mpitrain
