// ranks: 2 4
// Expert parallelism's token exchange (model/expert_dispatch.hpp) on real ranks: every routed
// row reaches the rank owning its expert, grouped by local expert then source, and the results
// come back to the places the rows left from; zero counts included.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "mpitrain/model/expert_dispatch.hpp"
#include "mpitrain/runtime/mpi.hpp"

using namespace mpitrain;

namespace {

constexpr int kRowFloats = 3;  // a row names itself: (source rank, expert, index among them)

// Rows source rank s routes to expert e: 0 to 3, zeros included (rank 0 routes none to expert 3).
int64_t routed(int s, int e) { return (3 * s + 5 * e + 1) % 4; }

// This rank's rows sorted by expert, and the counts.
std::vector<float> sorted_rows(int rank, int experts, std::vector<int64_t>& counts) {
  std::vector<float> rows;
  counts.assign(experts, 0);
  for (int e = 0; e < experts; ++e) {
    counts[e] = routed(rank, e);
    for (int64_t i = 0; i < counts[e]; ++i)
      rows.insert(rows.end(), {static_cast<float>(rank), static_cast<float>(e),
                               static_cast<float>(i)});
  }
  return rows;
}

}  // namespace

// The worked example's order at any ep: each local expert's rows, by source rank, each source's
// rows in their order; and nothing for an expert this rank does not own.
TEST(ExpertDispatch, RowsReachTheirExpertsOwnerGroupedByLocalExpert) {
  MpiCommunicator ep(MPI_COMM_WORLD);
  const int ranks = ep.size(), me = ep.rank();
  for (int per_rank : {1, 2}) {
    const int experts = per_rank * ranks;
    SCOPED_TRACE(std::to_string(experts) + " experts");
    ExpertDispatch dispatch(ep, experts);
    std::vector<int64_t> counts;
    const std::vector<float> rows = sorted_rows(me, experts, counts);
    dispatch.plan(counts.data());
    EXPECT_EQ(dispatch.sent_rows() * kRowFloats, static_cast<int64_t>(rows.size()));
    std::vector<float> expect;
    for (int j = 0; j < per_rank; ++j) {
      const int e = dispatch.first_expert() + j;
      int64_t n = 0;
      for (int s = 0; s < ranks; ++s)
        for (int64_t i = 0; i < routed(s, e); ++i, ++n)
          expect.insert(expect.end(), {static_cast<float>(s), static_cast<float>(e),
                                       static_cast<float>(i)});
      EXPECT_EQ(dispatch.local_counts()[j], n) << "local expert " << j;
    }
    std::vector<float> got(dispatch.received_rows() * kRowFloats, -1);
    dispatch.to_owners(rows.data(), got.data(), kRowFloats * sizeof(float));
    for (size_t r = 0; r < got.size(); r += kRowFloats)
      EXPECT_EQ(static_cast<int>(got[r + 1]) / per_rank, me)
          << "a row for expert " << got[r + 1] << " from rank " << got[r]
          << " was routed to the wrong rank";
    EXPECT_EQ(got, expect);
  }
}

// The owners' results go back to where their rows came from: each owner marks the rows it
// holds (+1000 x its rank), and every row returns to its place with its owner's mark.
TEST(ExpertDispatch, ResultsReturnToTheirRowsPlaces) {
  MpiCommunicator ep(MPI_COMM_WORLD);
  const int ranks = ep.size(), me = ep.rank(), experts = 2 * ranks;
  ExpertDispatch dispatch(ep, experts);
  std::vector<int64_t> counts;
  const std::vector<float> rows = sorted_rows(me, experts, counts);
  dispatch.plan(counts.data());
  std::vector<float> held(dispatch.received_rows() * kRowFloats);
  dispatch.to_owners(rows.data(), held.data(), kRowFloats * sizeof(float));
  for (size_t r = 0; r < held.size(); r += kRowFloats) held[r] += 1000.0f * me;
  std::vector<float> back(rows.size(), -1);
  dispatch.from_owners(held.data(), back.data(), kRowFloats * sizeof(float));
  for (size_t r = 0; r < rows.size(); r += kRowFloats) {
    const int owner = static_cast<int>(rows[r + 1]) / 2;
    EXPECT_EQ(back[r], rows[r] + 1000.0f * owner) << "row " << r / kRowFloats;
    EXPECT_EQ(back[r + 1], rows[r + 1]);
    EXPECT_EQ(back[r + 2], rows[r + 2]);
  }
}

// A rank that routes nothing, and experts that receive nothing: the calls still complete.
TEST(ExpertDispatch, NothingRoutedCompletes) {
  MpiCommunicator ep(MPI_COMM_WORLD);
  const int experts = 2 * ep.size();
  ExpertDispatch dispatch(ep, experts);
  std::vector<int64_t> counts(experts, 0);
  if (ep.rank() == 0) counts[experts - 1] = 2;  // the last rank's last expert gets 2 rows
  dispatch.plan(counts.data());
  const bool last = ep.rank() == ep.size() - 1;
  EXPECT_EQ(dispatch.received_rows(), last ? 2 : 0);
  std::vector<float> rows = {1, 2}, out(dispatch.received_rows(), -1);
  dispatch.to_owners(rows.data(), out.data(), sizeof(float));
  if (last) {
    EXPECT_EQ(out, (std::vector<float>{1, 2}));
  }
  std::vector<float> back(dispatch.sent_rows(), -1);
  dispatch.from_owners(out.data(), back.data(), sizeof(float));
  if (ep.rank() == 0) {
    EXPECT_EQ(back, (std::vector<float>{1, 2}));
  }
  EXPECT_THROW(ExpertDispatch(ep, experts + 1), Error);
}

// Rows in memory of the caller's (a device's): they move over the given communicator, arrive in
// the given staging and are regrouped by the given copy, never by the dispatch's own host
// staging; the same rows reach the same places as in host memory. A staging too small for what
// arrives is an Error, not an overrun.
TEST(ExpertDispatch, RowsInTheCallersMemoryMoveOverItsCommunicator) {
  MpiCommunicator ep(MPI_COMM_WORLD);
  const MpiComm rows_comm = MpiComm(MPI_COMM_WORLD).dup();
  MpiCommunicator rows_group(rows_comm.get());
  const int ranks = ep.size(), me = ep.rank(), experts = 2 * ranks;
  const size_t row_bytes = kRowFloats * sizeof(float);
  std::vector<int64_t> counts;
  const std::vector<float> rows = sorted_rows(me, experts, counts);

  ExpertDispatch host(ep, experts);
  host.plan(counts.data());
  std::vector<float> want(host.received_rows() * kRowFloats);
  host.to_owners(rows.data(), want.data(), row_bytes);

  std::vector<float> staging(ranks * rows.size() + kRowFloats);  // every rank's rows, at most
  size_t copied = 0;  // bytes through the copy
  auto copy = [&copied](void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    copied += bytes;
  };
  ExpertDispatch given(ep, experts, staging.size() * sizeof(float),
                       RowMemory{&rows_group, staging.data(), copy});
  given.plan(counts.data());
  rows_group.reset_bytes_sent();
  std::vector<float> got(given.received_rows() * kRowFloats, -1);
  given.to_owners(rows.data(), got.data(), row_bytes);
  EXPECT_EQ(got, want);
  EXPECT_EQ(copied, got.size() * sizeof(float)) << "the regrouping bypassed the given copy";
  if (ranks > 1) {
    EXPECT_GT(rows_group.bytes_sent(), 0u) << "the rows did not use their group";
  }
  std::vector<float> back(rows.size(), -1);
  given.from_owners(got.data(), back.data(), row_bytes);
  EXPECT_EQ(back, rows);

  // (Where every rank receives more than a row, so that all of them throw before the exchange.)
  ExpertDispatch small(ep, experts, row_bytes, RowMemory{&rows_group, staging.data(), copy});
  small.plan(counts.data());
  int over = small.received_rows() > 1 ? 1 : 0, all_over = 0;
  MPI_Allreduce(&over, &all_over, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  ASSERT_EQ(all_over, 1) << "the routing of sorted_rows no longer gives every rank two rows";
  EXPECT_THROW(small.to_owners(rows.data(), got.data(), row_bytes), Error);
}
