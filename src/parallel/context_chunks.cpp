#include "mpitrain/parallel/context_chunks.hpp"

#include <algorithm>
#include <string>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

ContextChunks::ContextChunks(int seq_len, int cp, int rank) : seq_len_(seq_len), cp_(cp), rank_(rank) {
  if (cp < 1 || rank < 0 || rank >= cp) MPITRAIN_THROW("context-parallel rank out of range");
  if (seq_len % (2 * cp) != 0)
    throw UsageError("seq-len " + std::to_string(seq_len) + " must be divisible by 2 x cp = " +
                     std::to_string(2 * cp) +
                     " (context parallelism cuts each sequence into 2 x cp equal chunks)");
}

std::vector<int> ContextChunks::positions(int r) const {
  const int c = seq_len_ / (2 * cp_);
  std::vector<int> pos(2 * static_cast<size_t>(c));
  for (int t = 0; t < c; ++t) {
    pos[t] = r * c + t;                        // chunk r
    pos[c + t] = (2 * cp_ - 1 - r) * c + t;  // chunk 2CP-1-r
  }
  return pos;
}

void ContextChunks::take(const int32_t* full, int32_t* local, int rows) const {
  const int c = seq_len_ / (2 * cp_), Tl = local_len();
  for (int b = 0; b < rows; ++b) {
    const int32_t* seq = full + static_cast<size_t>(b) * seq_len_;
    int32_t* out = local + static_cast<size_t>(b) * Tl;
    std::copy(seq + rank_ * c, seq + (rank_ + 1) * c, out);
    std::copy(seq + (2 * cp_ - 1 - rank_) * c, seq + (2 * cp_ - rank_) * c, out + c);
  }
}

}  // namespace mpitrain
