#include "mpitrain/train/owned_copy.hpp"

namespace mpitrain {

bool contiguous(const ShardRanges& owned) {
  const std::vector<FlatRange>& r = owned.ranges();
  for (size_t i = 1; i < r.size(); ++i)
    if (r[i].lo != r[i - 1].hi) return false;
  return true;
}

void take_owned(Backend<float>& backend, Buf<float> compact, CBuf<float> whole,
                const ShardRanges& owned) {
  for (size_t i = 0; i < owned.ranges().size(); ++i)
    backend.copy(compact + owned.at(i), whole + owned.ranges()[i].lo, owned.ranges()[i].size());
}

void put_owned(Backend<float>& backend, Buf<float> whole, CBuf<float> compact,
               const ShardRanges& owned) {
  for (size_t i = 0; i < owned.ranges().size(); ++i)
    backend.copy(whole + owned.ranges()[i].lo, compact + owned.at(i), owned.ranges()[i].size());
}

}  // namespace mpitrain
