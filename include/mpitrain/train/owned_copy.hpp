// A compact copy of a rank's owned elements (parallel/shard_ranges.hpp) where they do not lie
// back to back in the stage's whole buffer: ZeRO-1/2 with expert parallelism, whose owned ranges
// are a dense piece and an expert piece (zero_owned). The optimizer updates the compact copy;
// the whole buffer is what the model computes with and what the all-gathers fill.
//   take  compact[at(i) ..] = whole[ranges[i]] for every range i
//   put   whole[ranges[i]] = compact[at(i) ..]
#pragma once

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/parallel/shard_ranges.hpp"

namespace mpitrain {

// Whether the ranges lie back to back (each starting where the one before ends, as ZeRO-2's unit
// pieces without experts): the whole buffer from the first then serves as the compact one.
bool contiguous(const ShardRanges& owned);
void take_owned(Backend<float>& backend, Buf<float> compact, CBuf<float> whole,
                const ShardRanges& owned);
void put_owned(Backend<float>& backend, Buf<float> whole, CBuf<float> compact,
               const ShardRanges& owned);

}  // namespace mpitrain
