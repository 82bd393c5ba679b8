// ranks: 2
// CudaAwareMpiCommunicator (device pointers handed to a CUDA-aware MPI; started collectives
// staged through pinned buffers) against MpiCommunicator, every operation, with the ranks sharing
// one GPU (or each on its own); started all-reduce, all-gather, reduce-scatter and all-to-all in
// flight together beside point-to-point, and the staging pool's limit. Skipped,
// with the reason, where the MPI is not CUDA-aware (Debian's Open MPI is built without CUDA): every
// rank then exits 77, which mpirun passes on and ctest reports as skipped (SKIP_RETURN_CODE).
#include <cuda_runtime_api.h>

#include <cstdio>
#include <numeric>

#include "comm_checks.hpp"
#include "mpitrain/comm/cuda_aware_communicator.hpp"

using namespace mpitrain;
using comm_checks::DeviceVec;
using comm_checks::Stream;
using comm_checks::values;

namespace {
// Set (on every rank alike) when the test was skipped for want of a CUDA-aware MPI; main then
// returns 77 instead of RUN_ALL_TESTS()'s 0.
bool not_cuda_aware = false;

// Whether every rank's MPI is CUDA-aware; otherwise rank 0 says so and the caller skips.
bool cuda_aware_everywhere() {
  int unaware = mpi_cuda_aware() ? 0 : 1;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &unaware, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
  if (unaware) {
    not_cuda_aware = true;
    if (MpiComm::world().rank() == 0)
      std::printf("SKIP: this MPI is not CUDA-aware (MPIX_Query_cuda_support)\n");
  }
  return unaware == 0;
}

}  // namespace

TEST(CudaAwareComm, EveryOperationAsMpi) {
  if (!cuda_aware_everywhere()) GTEST_SKIP();
  Stream compute;
  MpiCommunicator world(MPI_COMM_WORLD, "world"), reference(MPI_COMM_WORLD);
  CudaAwareMpiCommunicator direct(world, compute.s, 1 << 20, std::vector<size_t>(4, 1 << 20));
  comm_checks::check_all(direct, reference, compute.s);
  EXPECT_GT(world.calls().snapshot().collectives, 0u);  // the watchdog sees its calls
}

// The four started collectives in flight at once (each holding one of the 4 staging buffers)
// beside a ring of device-pointer sends and receives (no staging buffer), waited in another
// order; a fifth started collective finds the pool full, so the four were staged.
TEST(CudaAwareComm, StartedCollectivesStagedBesidePointToPoint) {
  if (!cuda_aware_everywhere()) GTEST_SKIP();
  Stream compute;
  MpiCommunicator world(MPI_COMM_WORLD, "world"), reference(MPI_COMM_WORLD);
  CudaAwareMpiCommunicator direct(world, compute.s, 1 << 16, std::vector<size_t>(4, 1 << 16));
  const int rank = world.rank(), size = world.size();
  const cudaStream_t s = compute.s;
  const size_t n = 500, bytes = 29;
  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = 40 + 7 * r;
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  const size_t offset = std::accumulate(counts.begin(), counts.begin() + rank, size_t{0});

  std::vector<float> ar = values<float>(rank, n), rs = values<float>(rank, total);
  std::vector<float> ag(total, -1.0f);
  for (size_t i = 0; i < counts[rank]; ++i) ag[offset + i] = static_cast<float>(rank * 1000 + i);
  std::vector<uint8_t> in(size * bytes), out(size * bytes, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(rank * 31 + i);
  DeviceVec<float> dar(ar, s), drs(rs, s), dag(ag, s);
  DeviceVec<uint8_t> din(in, s), dout(out, s);
  const std::vector<float> mine = values<float>(rank, n);
  DeviceVec<float> dsend(mine, s), drecv(std::vector<float>(n, -1.0f), s);
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;

  const CommHandle hr = direct.recv_start(drecv.get(), n, prev, 3);
  const CommHandle har = direct.all_reduce_start(dar.get(), n, ReduceOp::Sum);
  const CommHandle hrs = direct.reduce_scatter_start(drs.get(), counts, ReduceOp::Sum);
  const CommHandle hs = direct.send_start(dsend.get(), n, next, 3);
  const CommHandle hag = direct.all_gather_start(dag.get(), counts);
  const CommHandle hat = direct.all_to_all_start(din.get(), dout.get(), bytes);
  try {
    direct.all_reduce_start(dar.get(), 1, ReduceOp::Sum);
    ADD_FAILURE() << "a fifth started collective: no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("of them are in flight"), std::string::npos) << e.what();
  }
  direct.progress();
  for (CommHandle h : {hat, hs, hrs, hag, hr, har}) direct.wait(h);

  reference.wait(reference.all_reduce_start(ar.data(), n, ReduceOp::Sum));
  reference.wait(reference.reduce_scatter_start(rs.data(), counts, ReduceOp::Sum));
  reference.wait(reference.all_gather_start(ag.data(), counts));
  reference.wait(reference.all_to_all_start(in.data(), out.data(), bytes));
  EXPECT_EQ(dar.host(s), ar) << "all_reduce_start";
  const std::vector<float> got_rs = drs.host(s);
  EXPECT_TRUE(std::equal(rs.begin() + offset, rs.begin() + offset + counts[rank],
                         got_rs.begin() + offset))
      << "reduce_scatter_start: this rank's block";
  EXPECT_EQ(dag.host(s), ag) << "all_gather_start";
  EXPECT_EQ(dout.host(s), out) << "all_to_all_start";
  EXPECT_EQ(drecv.host(s), values<float>(prev, n)) << "send/recv ring";
}

int main(int argc, char** argv) {
  const int rc = comm_checks::run_tests(argc, argv, false);
  return rc == 0 && not_cuda_aware ? 77 : rc;
}
