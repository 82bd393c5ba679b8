// What one collective costs on the wire for one rank: the same count for every operation and
// every communicator (MPI's, NCCL's, the staged ones), so that bytes_sent() compares formats and
// group sizes honestly. It is the bytes a bandwidth-optimal (ring) algorithm sends from each rank,
// nccl-tests' bus-bandwidth numerator (bus bandwidth = bus bytes / time), whatever algorithm the
// library really picks:
//   all-reduce of n bytes                      2 (P-1) / P * n
//   reduce-scatter, all-gather of total bytes  total - this rank's block   ((P-1) / P * total)
//   all-to-all of blocks of b bytes            (P-1) * b
//   broadcast of n bytes                       n   (a pipelined chain: each rank passes it on)
//   send of n bytes                            n
// On one rank nothing leaves: 0. So reduce-scatter + all-gather (ZeRO) cost what the all-reduce
// they replace does, and a format of half the bytes halves the count at every P.
#pragma once

#include <cstdint>

namespace mpitrain {

inline uint64_t all_reduce_bus_bytes(uint64_t n, int ranks) {
  return ranks > 1 ? 2 * static_cast<uint64_t>(ranks - 1) * n / static_cast<uint64_t>(ranks) : 0;
}
inline uint64_t blocks_bus_bytes(uint64_t total, uint64_t own, int ranks) {  // reduce-scatter,
  return ranks > 1 ? total - own : 0;                                        // all-gather
}
inline uint64_t all_to_all_bus_bytes(uint64_t block, int ranks) {
  return ranks > 1 ? static_cast<uint64_t>(ranks - 1) * block : 0;
}
inline uint64_t point_bus_bytes(uint64_t n, int ranks) {  // broadcast, send
  return ranks > 1 ? n : 0;
}

}  // namespace mpitrain
