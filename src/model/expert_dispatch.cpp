#include "mpitrain/model/expert_dispatch.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

ExpertDispatch::ExpertDispatch(Communicator& ep, int n_experts, size_t staging_bytes,
                               RowMemory memory)
    : ep_(ep),
      rows_(memory.rows ? *memory.rows : ep),
      memory_(std::move(memory)),
      staging_bytes_(staging_bytes),
      experts_(n_experts),
      local_(ep.size() > 0 ? n_experts / ep.size() : 0) {
  if (n_experts <= 0 || n_experts % ep.size() != 0)
    MPITRAIN_THROW(std::to_string(n_experts) + " experts do not split over " +
                   std::to_string(ep.size()) + " expert-parallel ranks");
  send_counts_.resize(experts_);
  arriving_.resize(experts_);  // ep x El
  to_rank_.resize(ep.size());
  from_rank_.resize(ep.size());
  local_counts_.resize(local_);
  send_bytes_.resize(ep.size());
  recv_bytes_.resize(ep.size());
  if (rows_.size() != ep.size())
    MPITRAIN_THROW("expert dispatch: the rows' communicator has " + std::to_string(rows_.size()) +
                   " ranks, the ep group " + std::to_string(ep.size()));
  if (memory_.rows && (!memory_.staging || !memory_.copy))
    MPITRAIN_THROW("expert dispatch: rows outside host memory without staging or a copy");
  if (!memory_.staging) host_staging_.resize(staging_bytes);
}

void ExpertDispatch::plan(const int64_t* counts) {
  std::copy(counts, counts + experts_, send_counts_.begin());
  // Block q of the counts (experts q El ..) goes to rank q: owners hold consecutive experts.
  ep_.wait(ep_.all_to_all_start(send_counts_.data(), arriving_.data(), local_ * sizeof(int64_t)));
  std::fill(local_counts_.begin(), local_counts_.end(), 0);
  sent_ = received_ = 0;
  for (int q = 0; q < ep_.size(); ++q) {
    to_rank_[q] = from_rank_[q] = 0;
    for (int j = 0; j < local_; ++j) {
      const int64_t out = send_counts_[q * local_ + j], in = arriving_[q * local_ + j];
      if (out < 0 || in < 0) MPITRAIN_THROW("expert dispatch: a negative row count");
      to_rank_[q] += out;
      from_rank_[q] += in;
      local_counts_[j] += in;
    }
    sent_ += to_rank_[q];
    received_ += from_rank_[q];
  }
}

void ExpertDispatch::exchange(const void* in, const std::vector<int64_t>& send_rows, void* out,
                              const std::vector<int64_t>& recv_rows, size_t row_bytes) {
  for (int q = 0; q < ep_.size(); ++q) {
    send_bytes_[q] = static_cast<size_t>(send_rows[q]) * row_bytes;
    recv_bytes_[q] = static_cast<size_t>(recv_rows[q]) * row_bytes;
  }
  rows_.wait(rows_.all_to_allv_start(in, send_bytes_, out, recv_bytes_));
}

void ExpertDispatch::regroup(const char* from, char* to, size_t row_bytes, bool to_grouped) const {
  const int ranks = ep_.size();
  size_t arrival = 0;  // rows before block (s, j) in arrival order
  for (int s = 0; s < ranks; ++s)
    for (int j = 0; j < local_; ++j) {
      size_t grouped = 0;  // rows before block (j, s) in grouped order
      for (int jj = 0; jj < j; ++jj) grouped += static_cast<size_t>(local_counts_[jj]);
      for (int ss = 0; ss < s; ++ss) grouped += static_cast<size_t>(arriving_[ss * local_ + j]);
      const size_t n = static_cast<size_t>(arriving_[s * local_ + j]) * row_bytes;
      const size_t a = arrival * row_bytes, g = grouped * row_bytes;
      if (n == 0) continue;
      char* dst = to + (to_grouped ? g : a);
      const char* src = from + (to_grouped ? a : g);
      if (memory_.copy)
        memory_.copy(dst, src, n);
      else
        std::memcpy(dst, src, n);
      arrival += static_cast<size_t>(arriving_[s * local_ + j]);
    }
}

char* ExpertDispatch::staging(size_t row_bytes) {
  const size_t bytes = static_cast<size_t>(received_) * row_bytes;
  if (memory_.staging) {
    if (bytes > staging_bytes_)
      MPITRAIN_THROW("expert dispatch: " + std::to_string(bytes) + " bytes arrive, the staging "
                     "holds " + std::to_string(staging_bytes_));
    return static_cast<char*>(memory_.staging);
  }
  host_staging_.resize(std::max(bytes, host_staging_.size()));
  return host_staging_.data();
}

void ExpertDispatch::to_owners(const void* rows, void* out, size_t row_bytes) {
  char* stage = staging(row_bytes);
  exchange(rows, to_rank_, stage, from_rank_, row_bytes);
  regroup(stage, static_cast<char*>(out), row_bytes, true);
}

void ExpertDispatch::from_owners(const void* in, void* rows, size_t row_bytes) {
  char* stage = staging(row_bytes);
  regroup(static_cast<const char*>(in), stage, row_bytes, false);
  exchange(stage, from_rank_, rows, to_rank_, row_bytes);
}

}  // namespace mpitrain
