// The one global order of training samples over a dataset's blend (data/dataset.hpp).
//
// Global sample k: BlendOrder picks the component and its stream position p; the component's
// own SampleOrder (its own seeded Rng streams, so components wrap into new epochs independently)
// maps p to one of its samples. An unweighted list is one component: the SampleOrder over every
// file's samples, as for a single file. The sequence depends on the files, weights, seed and k
// alone: not on the ranks, the micro-batches or how it is queried; a resume at consumed_samples
// continues it (the blend walks 0 .. consumed once at start-up, O(consumed * components)).
#pragma once

#include <cstdint>
#include <vector>

#include "mpitrain/data/blend.hpp"
#include "mpitrain/data/dataset.hpp"

namespace mpitrain {

class SampleStream {
 public:
  SampleStream(const Dataset& data, uint64_t seed, bool shuffle);  // data must outlive this
  // inputs, targets: seq_len each. Not thread-safe (the blend walks on from its last query).
  void read(uint64_t k, int32_t* inputs, int32_t* targets);

 private:
  const Dataset& data_;
  BlendOrder blend_;
  std::vector<SampleOrder> orders_;  // one per component
};

}  // namespace mpitrain
