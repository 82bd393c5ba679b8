// Expert parallelism's token exchange for one MoE layer (model/moe.hpp), Megatron-Core's
// all-to-all dispatcher without capacity or padding.
//
// The E routed experts are split over the ep ranks: rank q owns experts [q El, (q+1) El),
// El = E / ep, so expert e lives on rank e / El. Each rank has its R*K routed rows sorted by
// expert (counts[e] rows for expert e, contiguous, ascending e); since owners hold consecutive
// experts, the rows for rank q are one contiguous block. A micro-batch's exchange:
//   plan(counts)      all-to-all of the El counts each rank sends to each owner: afterwards
//                     this rank knows n[s][j], the rows source rank s sends to its local
//                     expert j (collective over ep)
//   to_owners(rows)   all-to-allv of the row blocks; what arrives in (source, expert) order is
//                     regrouped by local expert, then source: each local expert's rows
//                     contiguous for its grouped GEMM (collective over ep)
//   from_owners(out)  the reverse: the experts' results, grouped as to_owners left them, back to
//                     the ranks and places their rows came from (collective over ep)
// Backward uses the same two moves: the gradients of the experts' outputs go to_owners, the
// gradients of their inputs come back from_owners. Worked example, E = 4, ep = 2 (El = 2):
// rank 0 routes counts {1, 2, 0, 3}, rank 1 {2, 0, 1, 1}: rank 0 receives for expert 0 its own
// 1 row then rank 1's 2 rows, for expert 1 its own 2 rows; rank 1 receives for expert 2 rank 1's
// 1 row, for expert 3 rank 0's 3 rows then rank 1's 1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "mpitrain/comm/communicator.hpp"

namespace mpitrain {

// Where the rows live when they are not host memory (a device's): the communicator that moves
// them (the ep group's data communicator), a staging buffer in that memory of at least the
// largest exchange's bytes, and a copy within that memory (the regrouping's block copies).
struct RowMemory {
  Communicator* rows = nullptr;
  void* staging = nullptr;
  std::function<void(void* dst, const void* src, size_t bytes)> copy;
};

class ExpertDispatch {
 public:
  // ep: the expert-parallel group (host memory: the counts), not owned; n_experts divisible by
  // its size. staging_bytes: the largest exchange to_owners / from_owners will make (received
  // rows x row bytes), reserved here so that no step allocates. memory: the rows' (default:
  // host memory, moved over ep, staged here, copied by memcpy); its staging holds
  // staging_bytes.
  ExpertDispatch(Communicator& ep, int n_experts, size_t staging_bytes = 0,
                 RowMemory memory = {});

  int local_experts() const { return local_; }
  int first_expert() const { return ep_.rank() * local_; }

  // counts (E): this rank's rows routed to each expert. Collective over ep.
  void plan(const int64_t* counts);
  // After plan: the rows this rank's local expert j receives, summed over the sources (El), and
  // in all (what to_owners writes, what from_owners reads).
  const std::vector<int64_t>& local_counts() const { return local_counts_; }
  int64_t received_rows() const { return received_; }
  int64_t sent_rows() const { return sent_; }  // sum of counts

  // rows (sent_rows, row_bytes each) sorted by expert -> out (received_rows) grouped by local
  // expert, then source rank, then the source's order. Collective over ep.
  void to_owners(const void* rows, void* out, size_t row_bytes);
  // in (received_rows) grouped as to_owners writes -> rows (sent_rows) at the places of the
  // rows to_owners sent. Collective over ep.
  void from_owners(const void* in, void* rows, size_t row_bytes);

 private:
  // The block (source s, local expert j) between the arrival order (s, j) and the grouped order
  // (j, s), in rows: copies each from `from`'s order to the other.
  void regroup(const char* from, char* to, size_t row_bytes, bool to_grouped) const;
  // The staging for this exchange's received rows (memory's, or the host vector grown).
  char* staging(size_t row_bytes);
  void exchange(const void* in, const std::vector<int64_t>& send_rows, void* out,
                const std::vector<int64_t>& recv_rows, size_t row_bytes);

  Communicator& ep_;
  Communicator& rows_;  // moves the rows: memory.rows, else ep_
  RowMemory memory_;
  size_t staging_bytes_;
  int experts_, local_;
  std::vector<int64_t> send_counts_;      // (E): this rank's counts, as given to plan
  std::vector<int64_t> arriving_;         // (ep, El): n[s][j]
  std::vector<int64_t> to_rank_, from_rank_;  // (ep): rows sent to / received from each rank
  std::vector<int64_t> local_counts_;     // (El)
  int64_t received_ = 0, sent_ = 0;
  std::vector<char> host_staging_;        // the rows in arrival order (host memory)
  std::vector<size_t> send_bytes_, recv_bytes_;
};

}  // namespace mpitrain
