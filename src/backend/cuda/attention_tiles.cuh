// The tiling shared by the attention kernels (attention.cu, attention_block.cu): blocks of
// kWarps warps, tiles of kTile queries and kTile keys, each warp owning kRowsPerWarp query rows; a
// lane owns one key of a tile for the scores and output dims lane, lane + 32, ... (DPL of them).
#pragma once

#include <cstddef>
#include <string>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain::cuda::attention {

inline constexpr int kTile = 32;  // queries per block, keys per tile
inline constexpr int kWarps = 4;  // threads = 128
inline constexpr int kRowsPerWarp = kTile / kWarps;
inline constexpr int kMaxHeadSize = 256;

// Shared memory of a forward block: Q [kTile][hs], K [kTile][hs + 1] (padded: lanes read
// different rows), V [kTile][hs].
inline size_t forward_smem(int hs) { return sizeof(float) * kTile * (3 * hs + 1); }
// Of a backward block: K, V [kTile][hs + 1], Q, dO [kTile][hs], P, dS [kTile][kTile + 1], the
// query rows' lse and D [kTile].
inline size_t backward_smem(int hs) {
  return sizeof(float) *
         (2 * kTile * (hs + 1) + 2 * kTile * hs + 2 * kTile * (kTile + 1) + 2 * kTile);
}

// The kernel instance for head size hs: dims per lane 2, 4 or 8.
template <class F>
void dispatch(int hs, F&& f) {
  if (hs <= 64)
    f.template operator()<2>();
  else if (hs <= 128)
    f.template operator()<4>();
  else
    f.template operator()<8>();
}

inline void check_heads(int hs, int NH, int NKV) {
  if (hs > kMaxHeadSize || hs <= 0 || NKV <= 0 || NH % NKV != 0)
    MPITRAIN_THROW("attention kernel: head size must be in 1.." + std::to_string(kMaxHeadSize) +
                   " and the query heads a multiple of the kv heads");
}

}  // namespace mpitrain::cuda::attention
