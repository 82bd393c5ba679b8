// Which component of a weighted blend supplies each sample of the global order (Megatron's rule).
//
// Global sample k goes to the most under-served component: the i with the largest
// w_i * (k + 1) - n_i, where n_i is how many of samples 0 .. k-1 went to i (ties: the lowest i).
// Over any prefix of K samples each n_i stays within one sample of w_i * K. The picks depend on
// the weights and k alone: not on the ranks, the seed or the micro-batches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mpitrain {

struct BlendPick {
  size_t component;  // which component
  uint64_t index;    // how many samples that component gave before this one: its stream position
};

class BlendOrder {
 public:
  explicit BlendOrder(std::vector<double> weights);  // normalised (sum 1), each > 0
  // The pick of global sample k. Walks on from the last query: O(1) amortised for increasing k,
  // O(k * components) after a smaller k (a resume at k costs that once). Not thread-safe.
  BlendPick at(uint64_t k);

 private:
  std::vector<double> weights_;
  uint64_t next_ = 0;             // the sample the counts stand before
  std::vector<uint64_t> counts_;  // samples each component gave among 0 .. next_-1
};

}  // namespace mpitrain
