// Context parallelism's causal load balance (Megatron-Core, torchtitan): a sequence of T tokens
// is cut into 2 CP chunks of T / (2 CP) tokens; cp rank r holds chunks r and 2CP-1-r, in that
// order, as its T / CP rows. Under the causal mask every rank then attends to the same number
// of (query, key) pairs. Example T 8, CP 2: rank 0 holds positions 0 1 6 7, rank 1 2 3 4 5.
#pragma once

#include <cstdint>
#include <vector>

namespace mpitrain {

class ContextChunks {
 public:
  // UsageError unless 2 cp divides seq_len.
  ContextChunks(int seq_len, int cp, int rank);

  int cp() const { return cp_; }
  int local_len() const { return seq_len_ / cp_; }  // rows per sequence on each rank
  // The sequence position of each of rank r's local rows (T / CP values).
  std::vector<int> positions(int r) const;
  std::vector<int> positions() const { return positions(rank_); }
  // local(rows, T/CP) = this rank's two chunks of each of `rows` sequences full(rows, T).
  void take(const int32_t* full, int32_t* local, int rows) const;

 private:
  int seq_len_, cp_, rank_;
};

}  // namespace mpitrain
