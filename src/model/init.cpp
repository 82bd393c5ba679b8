// Deterministic parameter initialisation (GPT-2 / nanoGPT scheme, also used for Llama).
#include <algorithm>
#include <cmath>
#include <vector>

#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {

template <typename T>
void initial_tensors(const ModelConfig& config, const ParamLayout& layout, uint64_t seed,
                     const std::function<void(const ParamTensor&, const T*)>& take) {
  const double std_dev = 0.02;
  const double residual_std = std_dev / std::sqrt(2.0 * config.n_layer);  // output projections
  const size_t C = config.d_model;
  std::vector<T> full, local;  // one whole logical tensor at a time, and this rank's part
  for (const ParamTensor& t : layout.tensors()) {
    size_t numel = 1;
    for (int64_t d : t.global_shape) numel *= static_cast<size_t>(d);
    full.assign(numel, T(0));
    switch (t.slot) {
      case Slot::Ln1W: case Slot::Ln2W: case Slot::LnfW: case Slot::QNormW: case Slot::KNormW:
        full.assign(numel, T(1));
        break;
      case Slot::Ln1B: case Slot::Ln2B: case Slot::LnfB:
      case Slot::QkvB: case Slot::ProjB: case Slot::FcB: case Slot::FcProjB:
        break;
      default: {
        Rng rng(seed, rng_stream::kParamInit + t.global_index);
        const bool output_projection =
            t.slot == Slot::ProjW || t.slot == Slot::FcProjW || t.slot == Slot::ExpertProjW;
        const double s = output_projection ? residual_std : std_dev;
        // Vocabulary tables: only the first vocab_size rows are real; padding rows stay zero.
        const bool vocab_table = t.slot == Slot::Wte || t.slot == Slot::LmHead;
        const size_t real = vocab_table ? static_cast<size_t>(config.vocab_size) * C : numel;
        for (size_t j = 0; j < real; ++j) full[j] = static_cast<T>(s * rng.normal());
      }
    }
    local.resize(t.numel);
    take_shard(t, full.data(), local.data());
    take(t, local.data());
  }
}

template <typename T>
void Model<T>::init(uint64_t seed) {
  std::vector<T> local(layout_.total());  // this rank's parameters, uploaded at the end
  initial_tensors<T>(config_, layout_, seed, [&](const ParamTensor& t, const T* values) {
    std::copy(values, values + t.numel, local.data() + t.offset);
  });
  backend_.upload(params_, local.data(), local.size());
}

template void initial_tensors(const ModelConfig&, const ParamLayout&, uint64_t,
                              const std::function<void(const ParamTensor&, const float*)>&);
template void Model<float>::init(uint64_t);
template void Model<double>::init(uint64_t);

}  // namespace mpitrain
