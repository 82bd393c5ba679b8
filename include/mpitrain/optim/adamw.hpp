// AdamW (decoupled weight decay) over the model's flat parameter buffer.
//
// State m and v share the parameters' layout. Weight decay applies only to the tensors the
// layout marks (matrices, embeddings); norms and biases are not decayed.
#pragma once

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/model/params.hpp"

namespace mpitrain {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

template <typename T>
class AdamW {
 public:
  AdamW(Backend<T>& backend, const ParamLayout& layout, const AdamWConfig& config);
  ~AdamW();
  AdamW(const AdamW&) = delete;
  AdamW& operator=(const AdamW&) = delete;

  // One update: params -= lr * (adam direction(grad_scale * grads) + wd * params).
  void step(T* params, const T* grads, float lr, float grad_scale);
  int steps_taken() const { return t_; }
  T* m() { return m_; }  // state in the parameters' layout, for checkpoints
  T* v() { return v_; }
  void set_steps_taken(int t) { t_ = t; }  // after loading m and v

 private:
  Backend<T>& backend_;
  const ParamLayout& layout_;
  AdamWConfig config_;
  T* m_ = nullptr;  // first moment, zero-initialised
  T* v_ = nullptr;  // second moment, zero-initialised
  int t_ = 0;
};

}  // namespace mpitrain
