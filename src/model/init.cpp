// Deterministic parameter initialisation (GPT-2 / nanoGPT scheme, also used for Llama).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {

namespace {

// x[0, numel) = tensor t's values (x its whole logical tensor): s N(0, 1) for the first `real`,
// zero after them. Chunk c of kInitChunk values is drawn from the stream (seed,
// param_init_stream(t.global_index, c)), both of Box–Muller's values kept, so that the chunks fill
// on every thread at once (zeros too: the pages are touched in parallel), the same values at any
// thread count (one stream per tensor and one normal() a value drew ~30M values/s: minutes for a
// model of billions). Only the chunks that this rank's part of t lies in (for_each_run) are drawn,
// the others zero: under tensor parallelism a row-split tensor's share.
template <typename T>
void fill_normal(T* x, size_t numel, size_t real, double s, uint64_t seed, const ParamTensor& t) {
  constexpr size_t K = rng_stream::kInitChunk;
  const size_t chunks = (numel + K - 1) / K;
  if (chunks == 0) return;
  rng_stream::param_init_stream(t.global_index, chunks - 1);  // in range: checked before the loop
  std::vector<char> held(chunks, 0);
  for_each_run(t, [&](uint64_t g, uint64_t, uint64_t count) {
    for (uint64_t c = g / K; c < chunks && c * K < g + count; ++c) held[c] = 1;
  });
#pragma omp parallel for schedule(dynamic) if (chunks > 1)
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * K, end = std::min(numel, begin + K);
    const size_t drawn = held[c] ? std::clamp(real, begin, end) : begin;  // [begin, drawn)
    Rng rng(seed, rng_stream::param_init_stream(t.global_index, c));
    for (size_t j = begin; j < drawn; j += 2) {  // a pair at a time (K is even)
      const auto [a, b] = rng.normal_pair();
      x[j] = static_cast<T>(s * a);
      if (j + 1 < drawn) x[j + 1] = static_cast<T>(s * b);
    }
    std::fill(x + drawn, x + end, T(0));
  }
}

}  // namespace

template <typename T>
void initial_tensors(const ModelConfig& config, const ParamLayout& layout, uint64_t seed,
                     const std::function<void(const ParamTensor&, const T*)>& take) {
  const double std_dev = 0.02;
  const double residual_std = std_dev / std::sqrt(2.0 * config.n_layer);  // output projections
  const size_t C = config.d_model;
  std::unique_ptr<T[]> full;  // one whole logical tensor at a time (capacity values)
  size_t capacity = 0;
  std::vector<T> local;  // this rank's part of it, where that is not the whole
  for (const ParamTensor& t : layout.tensors()) {
    size_t numel = 1;
    for (int64_t d : t.global_shape) numel *= static_cast<size_t>(d);
    if (numel > capacity) full = std::make_unique_for_overwrite<T[]>(capacity = numel);
    switch (t.slot) {
      case Slot::Ln1W: case Slot::Ln2W: case Slot::LnfW: case Slot::QNormW: case Slot::KNormW:
        std::fill_n(full.get(), numel, T(1));
        break;
      case Slot::Ln1B: case Slot::Ln2B: case Slot::LnfB:
      case Slot::QkvB: case Slot::ProjB: case Slot::FcB: case Slot::FcProjB:
        std::fill_n(full.get(), numel, T(0));
        break;
      default: {
        const bool output_projection =
            t.slot == Slot::ProjW || t.slot == Slot::FcProjW || t.slot == Slot::ExpertProjW;
        // Vocabulary tables: only the first vocab_size rows are real; padding rows stay zero.
        const bool vocab_table = t.slot == Slot::Wte || t.slot == Slot::LmHead;
        fill_normal(full.get(), numel,
                    vocab_table ? static_cast<size_t>(config.vocab_size) * C : numel,
                    output_projection ? residual_std : std_dev, seed, t);
      }
    }
    if (t.numel == numel) {  // this rank holds the whole tensor
      take(t, full.get());
      continue;
    }
    local.resize(t.numel);
    take_shard(t, full.get(), local.data());
    take(t, local.data());
  }
}

template <typename T>
void Model<T>::init(uint64_t seed) {
  initial_tensors<T>(config_, layout_, seed, [&](const ParamTensor& t, const T* values) {
    backend_.upload(params_ + t.offset, values, t.numel);  // the tensors tile the flat buffer
  });
}

template void initial_tensors(const ModelConfig&, const ParamLayout&, uint64_t,
                              const std::function<void(const ParamTensor&, const float*)>&);
template void Model<float>::init(uint64_t);
template void Model<double>::init(uint64_t);

}  // namespace mpitrain
