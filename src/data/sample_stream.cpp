#include "mpitrain/data/sample_stream.hpp"

#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {

SampleStream::SampleStream(const Dataset& data, uint64_t seed, bool shuffle)
    : data_(data), blend_(data.weights()) {
  for (size_t c = 0; c < data.components(); ++c)
    orders_.emplace_back(data.component(c).count(), seed, shuffle,
                         c == 0 ? rng_stream::kDataOrder : rng_stream::kBlendOrder + (c << 32));
}

void SampleStream::read(uint64_t k, int32_t* inputs, int32_t* targets) {
  const BlendPick pick = blend_.at(k);
  data_.component(pick.component).read(orders_[pick.component].at(pick.index), inputs, targets);
}

}  // namespace mpitrain
