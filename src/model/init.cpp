// Deterministic parameter initialisation (GPT-2 / nanoGPT scheme, also used for Llama).
#include <cmath>

#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {

template <typename T>
void Model<T>::init(uint64_t seed) {
  const double std_dev = 0.02;
  const double residual_std = std_dev / std::sqrt(2.0 * config_.n_layer);  // output projections
  const size_t C = config_.d_model;
  const auto& tensors = layout_.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const ParamTensor& t = tensors[i];
    T* w = params_ + t.offset;
    switch (t.slot) {
      case Slot::Ln1W: case Slot::Ln2W: case Slot::LnfW:
        for (size_t j = 0; j < t.numel; ++j) w[j] = T(1);
        break;
      case Slot::Ln1B: case Slot::Ln2B: case Slot::LnfB:
      case Slot::QkvB: case Slot::ProjB: case Slot::FcB: case Slot::FcProjB:
        for (size_t j = 0; j < t.numel; ++j) w[j] = T(0);
        break;
      default: {
        Rng rng(seed, rng_stream::kParamInit + i);  // per tensor: layout-independent values
        const double s = (t.slot == Slot::ProjW || t.slot == Slot::FcProjW) ? residual_std : std_dev;
        // Vocabulary tables: only the first vocab_size rows are real; padding rows stay zero.
        const bool vocab_table = t.slot == Slot::Wte || t.slot == Slot::LmHead;
        const size_t real = vocab_table ? static_cast<size_t>(config_.vocab_size) * C : t.numel;
        for (size_t j = 0; j < t.numel; ++j) w[j] = j < real ? static_cast<T>(s * rng.normal()) : T(0);
      }
    }
  }
}

template void Model<float>::init(uint64_t);
template void Model<double>::init(uint64_t);

}  // namespace mpitrain
