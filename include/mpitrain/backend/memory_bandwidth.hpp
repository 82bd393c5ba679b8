// The machine's memory bandwidth: the floor of the ops that move bytes (--profile-ops).
#pragma once

#include <cstddef>

namespace mpitrain {

// GB/s of a copy of `bytes` between two buffers with the current OpenMP thread count, counting
// the bytes read and the bytes written (2 x bytes a copy): the best of `repeats` timed copies
// after one that touches the pages. Larger than the caches (a few times the L3) it is the DRAM
// bandwidth a streaming op sees.
double measure_copy_gbs(size_t bytes, int repeats);

}  // namespace mpitrain
