// What a step's update needs of the data-parallel sync, whichever ZeRO level does it:
//   levels 0 and 1   GradBuckets over the model's whole gradient buffer (train/bucket_sync.hpp)
//   levels 2 and 3   ShardedUnits (train/sharded_units.hpp)
// A step: zero_grads(); backward (ready_from as layers finish); finish(); the update of
// owned_params() from owned_grads(); params_updated().
#pragma once

#include <cstddef>

#include "mpitrain/backend/buf.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"

namespace mpitrain {

class DpSync {
 public:
  virtual ~DpSync() = default;
  virtual void zero_grads() = 0;
  // Backward has finished every gradient at flat offsets >= offset.
  virtual void ready_from(size_t offset) = 0;
  // The step's gradient sums over the data-parallel group are complete for owned().
  virtual void finish() = 0;
  // The elements this rank updates, and their summed gradients and compute copy, compact.
  virtual const ShardRanges& owned() const = 0;
  virtual float* owned_grads() = 0;
  virtual Buf<float> owned_params() = 0;
  // The optimizer has written owned_params(): every rank's copy is made whole again.
  virtual void params_updated() = 0;
};

}  // namespace mpitrain
