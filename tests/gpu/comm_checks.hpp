// Shared by the MPI tests of the device-memory communicators (test_nccl_comm, test_staged_comm,
// test_cuda_aware_comm):
// a main that skips without the GPUs it needs, and every Communicator operation run on device
// buffers through the communicator under test and on host copies through MpiCommunicator over
// the same ranks, compared element for element (2-byte tensors bit for bit). The values are small
// integers, so every sum is exact whatever order the ranks are added in (in bf16 and fp16 too:
// all below 256).
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda/device.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/comm/bus_bytes.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/runtime/device.hpp"
#include "mpitrain/runtime/mpi.hpp"

namespace comm_checks {

using namespace mpitrain;

// MPI around the tests, each rank on GPU local_rank % visible (select_device). Without a device,
// or with fewer devices than ranks where one_gpu_per_rank, every rank says why and exits 77
// (ctest: skipped). Rank 0 prints the device table.
inline int run_tests(int argc, char** argv, bool one_gpu_per_rank) {
  MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  const MpiComm& world = MpiComm::world();
  const MpiComm node = world.split_shared();
  const cuda::DeviceProbe probe = cuda::probe_devices();
  int skip = probe.count == 0 || (one_gpu_per_rank && probe.count < node.size()) ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, world.get()));
  if (skip) {
    if (world.rank() == 0)
      std::printf("SKIP: %s\n", probe.count == 0
                                    ? probe.reason.c_str()
                                    : (std::to_string(node.size()) + " ranks on a node with " +
                                       std::to_string(probe.count) +
                                       " GPUs: NCCL needs one GPU per rank").c_str());
    return 77;
  }
  const DeviceChoice choice = select_device(node.rank(), node.size());
  const std::vector<DeviceInfo> table = gather_device_table(device_info(world.rank()), world.get());
  if (world.rank() == 0) {
    if (choice.shared) std::printf("%s\n", choice.note.c_str());
    std::printf("%s", format_device_table(table).c_str());
  }
  return RUN_ALL_TESTS();
}

// A non-blocking stream for the communicator under test to compute on, destroyed with this.
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

// A device copy of a host vector, made and read back on `stream` (the communicators' compute
// stream, non-blocking: the legacy stream's cudaMemcpy would not be ordered with it, and from
// pageable memory it may return before the copy has landed).
template <typename E>
class DeviceVec {
 public:
  DeviceVec(const std::vector<E>& host, cudaStream_t stream) : n_(host.size()) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr_), std::max<size_t>(1, n_) * sizeof(E)));
    CUDA_CHECK(
        cudaMemcpyAsync(ptr_, host.data(), n_ * sizeof(E), cudaMemcpyHostToDevice, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  ~DeviceVec() { cudaFree(ptr_); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  E* get() { return ptr_; }
  // After the stream's work so far.
  std::vector<E> host(cudaStream_t stream) const {
    std::vector<E> out(n_);
    CUDA_CHECK(
        cudaMemcpyAsync(out.data(), ptr_, n_ * sizeof(E), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    return out;
  }

 private:
  E* ptr_ = nullptr;
  size_t n_;
};

// (rank + 1) * (i % 7 + 1) - 3 * (i % 2): small integers, different on every rank.
template <typename E>
std::vector<E> values(int rank, size_t n) {
  std::vector<E> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<E>((rank + 1) * (i % 7 + 1) - 3 * (i % 2));
  return v;
}

// The bits of f as a 2-byte tensor of type p.
inline std::vector<uint16_t> bits_of(const std::vector<float>& f, Precision p) {
  std::vector<uint16_t> v(f.size());
  for (size_t i = 0; i < f.size(); ++i)
    v[i] = p == Precision::Bf16 ? to_bf16_bits(f[i]) : to_fp16_bits(f[i]);
  return v;
}

// values() as a 2-byte tensor of type p (exact: small integers).
inline std::vector<uint16_t> two_byte_values(int rank, size_t n, Precision p) {
  return bits_of(values<float>(rank, n), p);
}

// The 2-byte operations (bf16 / fp16 bits): the all-reduce (Sum; other operations throw), the
// blocking all-gather and reduce-scatter (Sum), a ring of sends and receives, the uneven
// all-gather; each counts 2 bytes an element.
inline void check_two_byte(Communicator& dev, MpiCommunicator& mpi, cudaStream_t stream) {
  const int rank = mpi.rank(), size = mpi.size();
  const size_t n = 1000;
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    SCOPED_TRACE(to_string(p));
    std::vector<uint16_t> h = two_byte_values(rank, n, p);
    DeviceVec<uint16_t> d(h, stream);
    const uint64_t before = dev.bytes_sent();
    dev.all_reduce(d.get(), n, p, ReduceOp::Sum);
    EXPECT_EQ(dev.bytes_sent() - before, all_reduce_bus_bytes(2 * n, size));
    mpi.all_reduce(h.data(), n, p, ReduceOp::Sum);
    EXPECT_EQ(d.host(stream), h) << "all_reduce 2-byte";
    std::vector<float> sum(n, 0.0f);  // exact, in fp32 and in p
    for (int q = 0; q < size; ++q) {
      const std::vector<float> theirs = values<float>(q, n);
      for (size_t i = 0; i < n; ++i) sum[i] += theirs[i];
    }
    EXPECT_EQ(h, bits_of(sum, p)) << "MpiCommunicator's 2-byte all_reduce";
    EXPECT_THROW(dev.all_reduce(d.get(), n, p, ReduceOp::Max), Error);
    EXPECT_THROW(mpi.all_reduce(h.data(), n, p, ReduceOp::Max), Error);
    // the blocking gather and reduce-scatter (sequence parallelism's), bit for bit
    const std::vector<uint16_t> in = two_byte_values(rank, n, p);
    std::vector<uint16_t> out(size * n, 0xffff);
    DeviceVec<uint16_t> din(in, stream), dout(out, stream);
    dev.all_gather(din.get(), dout.get(), n);
    mpi.all_gather(in.data(), out.data(), n);
    EXPECT_EQ(dout.host(stream), out) << "all_gather 2-byte";
    const std::vector<uint16_t> whole = two_byte_values(rank, size * n, p);
    std::vector<uint16_t> part(n, 0xffff);
    DeviceVec<uint16_t> dwhole(whole, stream), dpart(part, stream);
    dev.reduce_scatter(dwhole.get(), dpart.get(), n, p, ReduceOp::Sum);
    mpi.reduce_scatter(whole.data(), part.data(), n, p, ReduceOp::Sum);
    EXPECT_EQ(dpart.host(stream), part) << "reduce_scatter 2-byte";
    EXPECT_THROW(dev.reduce_scatter(dwhole.get(), dpart.get(), n, p, ReduceOp::Max), Error);
  }

  const Precision p = Precision::Bf16;
  const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
  const std::vector<uint16_t> mine = two_byte_values(rank, n, p);
  DeviceVec<uint16_t> dsend(mine, stream), drecv(std::vector<uint16_t>(n, 0xffff), stream);
  const uint64_t before = dev.bytes_sent();
  const CommHandle hr = dev.recv_start(drecv.get(), n, prev, 9);
  const CommHandle hs = dev.send_start(dsend.get(), n, next, 9);
  dev.wait(hs);
  dev.wait(hr);
  EXPECT_EQ(dev.bytes_sent() - before, point_bus_bytes(2 * n, size));
  std::vector<uint16_t> got(n, 0xffff);
  const CommHandle mr = mpi.recv_start(got.data(), n, prev, 9);
  const CommHandle ms = mpi.send_start(mine.data(), n, next, 9);
  mpi.wait(ms);
  mpi.wait(mr);
  EXPECT_EQ(drecv.host(stream), got) << "send/recv ring 2-byte";
  EXPECT_EQ(got, two_byte_values(prev, n, p));

  std::vector<size_t> counts(size);
  for (int r = 0; r < size; ++r) counts[r] = r == 1 ? 0 : 101 + 13 * r;  // odd: 2-byte offsets
  const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
  size_t offset = 0;
  for (int r = 0; r < rank; ++r) offset += counts[r];
  std::vector<uint16_t> ag(total, 0xffff);
  const std::vector<uint16_t> block = two_byte_values(rank, counts[rank], p);
  std::copy(block.begin(), block.end(), ag.begin() + offset);
  DeviceVec<uint16_t> dag(ag, stream);
  dev.wait(dev.all_gather_start(dag.get(), counts));
  mpi.wait(mpi.all_gather_start(ag.data(), counts));
  EXPECT_EQ(dag.host(stream), ag) << "all_gather_start 2-byte (uneven)";
  size_t at = 0;
  for (int r = 0; r < size; ++r) {
    const std::vector<uint16_t> theirs = two_byte_values(r, counts[r], p);
    EXPECT_TRUE(std::equal(theirs.begin(), theirs.end(), ag.begin() + at)) << "block of " << r;
    at += counts[r];
  }
}

// The communicator under test (`dev`, device memory) against `mpi` (host) for every operation;
// `stream`: the compute stream dev was made with. The pairs must count the same bytes.
inline void check_all(Communicator& dev, MpiCommunicator& mpi, cudaStream_t stream) {
  const int rank = mpi.rank(), size = mpi.size();
  ASSERT_EQ(dev.rank(), rank);
  ASSERT_EQ(dev.size(), size);
  const size_t n = 1000;
  dev.reset_bytes_sent();
  mpi.reset_bytes_sent();

  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min}) {
    std::vector<float> f = values<float>(rank, n);
    DeviceVec<float> df(f, stream);
    dev.all_reduce(df.get(), n, op);
    mpi.all_reduce(f.data(), n, op);
    EXPECT_EQ(df.host(stream), f) << "all_reduce float";
    std::vector<double> d = values<double>(rank, n);
    DeviceVec<double> dd(d, stream);
    dev.all_reduce(dd.get(), n, op);
    mpi.all_reduce(d.data(), n, op);
    EXPECT_EQ(dd.host(stream), d) << "all_reduce double";
    std::vector<int64_t> l = values<int64_t>(rank, n);
    DeviceVec<int64_t> dl(l, stream);
    dev.all_reduce(dl.get(), n, op);
    mpi.all_reduce(l.data(), n, op);
    EXPECT_EQ(dl.host(stream), l) << "all_reduce int64";
  }
  {
    std::vector<float> b = values<float>(rank, n);
    DeviceVec<float> db(b, stream);
    dev.broadcast(db.get(), n * sizeof(float), size - 1);
    mpi.broadcast(b.data(), n * sizeof(float), size - 1);
    EXPECT_EQ(db.host(stream), b) << "broadcast";
  }
  dev.barrier();
  {
    const std::vector<float> in = values<float>(rank, n);
    std::vector<float> out(size * n, -1.0f);
    DeviceVec<float> din(in, stream), dout(out, stream);
    dev.all_gather(din.get(), dout.get(), n);
    mpi.all_gather(in.data(), out.data(), n);
    EXPECT_EQ(dout.host(stream), out) << "all_gather";
    std::vector<float> whole(size * n, -1.0f);  // in place
    std::copy(in.begin(), in.end(), whole.begin() + rank * n);
    DeviceVec<float> dwhole(whole, stream);
    dev.all_gather(dwhole.get() + rank * n, dwhole.get(), n);
    EXPECT_EQ(dwhole.host(stream), out) << "all_gather in place";
  }
  {
    const std::vector<float> in = values<float>(rank, size * n);
    std::vector<float> out(n);
    DeviceVec<float> din(in, stream), dout(out, stream);
    dev.reduce_scatter(din.get(), dout.get(), n, ReduceOp::Sum);
    mpi.reduce_scatter(in.data(), out.data(), n, ReduceOp::Sum);
    EXPECT_EQ(dout.host(stream), out) << "reduce_scatter";
  }
  {  // started: two all-reduces in flight, then a ring exchange of sends and receives
    std::vector<float> a = values<float>(rank, n), b = values<float>(rank + 5, n);
    DeviceVec<float> da(a, stream), db(b, stream);
    const CommHandle ha = dev.all_reduce_start(da.get(), n, ReduceOp::Sum);
    const CommHandle hb = dev.all_reduce_start(db.get(), n, ReduceOp::Max);
    dev.progress();
    dev.wait(hb);
    dev.wait(ha);
    mpi.all_reduce(a.data(), n, ReduceOp::Sum);
    mpi.all_reduce(b.data(), n, ReduceOp::Max);
    EXPECT_EQ(da.host(stream), a) << "all_reduce_start";
    EXPECT_EQ(db.host(stream), b) << "all_reduce_start";

    const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    const std::vector<float> mine = values<float>(rank, n);
    DeviceVec<float> dsend(mine, stream), drecv(std::vector<float>(n, -1.0f), stream);
    const CommHandle hr = dev.recv_start(drecv.get(), n, prev, 7);
    const CommHandle hs = dev.send_start(dsend.get(), n, next, 7);
    dev.wait(hs);
    dev.wait(hr);
    std::vector<float> got(n, -1.0f);
    const CommHandle mr = mpi.recv_start(got.data(), n, prev, 7);
    const CommHandle ms = mpi.send_start(mine.data(), n, next, 7);
    mpi.wait(ms);
    mpi.wait(mr);
    EXPECT_EQ(drecv.host(stream), got) << "send/recv ring";
    EXPECT_EQ(got, values<float>(prev, n));
  }
  {  // raw bytes: all-to-all and all-gather
    const size_t bytes = 37;
    std::vector<uint8_t> in(size * bytes), out(size * bytes, 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(rank * 31 + i);
    DeviceVec<uint8_t> din(in, stream), dout(out, stream);
    dev.wait(dev.all_to_all_start(din.get(), dout.get(), bytes));
    mpi.wait(mpi.all_to_all_start(in.data(), out.data(), bytes));
    EXPECT_EQ(dout.host(stream), out) << "all_to_all_start";
    std::vector<uint8_t> gathered(size * bytes, 0);
    DeviceVec<uint8_t> dg(gathered, stream);
    dev.wait(dev.all_gather_start(din.get(), dg.get(), bytes));
    mpi.wait(mpi.all_gather_start(in.data(), gathered.data(), bytes));
    EXPECT_EQ(dg.host(stream), gathered) << "all_gather_start (bytes)";
  }
  {  // uneven all-to-all of bytes: rank r sends (r + 2q) % 3 * 5 bytes to rank q (0 included)
    std::vector<size_t> send(size), recv(size);
    for (int q = 0; q < size; ++q) {
      send[q] = static_cast<size_t>((rank + 2 * q) % 3 * 5);
      recv[q] = static_cast<size_t>((q + 2 * rank) % 3 * 5);
    }
    std::vector<uint8_t> in(std::accumulate(send.begin(), send.end(), size_t{0}));
    std::vector<uint8_t> out(std::accumulate(recv.begin(), recv.end(), size_t{0}), 0);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint8_t>(rank * 29 + i);
    DeviceVec<uint8_t> din(in, stream), dout(out, stream);
    dev.wait(dev.all_to_allv_start(din.get(), send, dout.get(), recv));
    mpi.wait(mpi.all_to_allv_start(in.data(), send, out.data(), recv));
    EXPECT_EQ(dout.host(stream), out) << "all_to_allv_start";
  }
  {  // uneven blocks, one of them empty
    std::vector<size_t> counts(size);
    for (int r = 0; r < size; ++r) counts[r] = r == 1 ? 0 : 100 + 13 * r;
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t{0});
    size_t offset = 0;
    for (int r = 0; r < rank; ++r) offset += counts[r];
    std::vector<float> rs = values<float>(rank, total);
    DeviceVec<float> drs(rs, stream);
    dev.wait(dev.reduce_scatter_start(drs.get(), counts, ReduceOp::Sum));
    mpi.wait(mpi.reduce_scatter_start(rs.data(), counts, ReduceOp::Sum));
    std::vector<float> sum(counts[rank], 0.0f);  // this rank's block, summed over the ranks
    for (int q = 0; q < size; ++q) {
      const std::vector<float> theirs = values<float>(q, total);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += theirs[offset + i];
    }
    const std::vector<float> got = drs.host(stream);
    EXPECT_TRUE(std::equal(sum.begin(), sum.end(), got.begin() + offset))
        << "reduce_scatter_start (uneven): the block at its own offset";
    EXPECT_TRUE(std::equal(sum.begin(), sum.end(), rs.begin() + offset))
        << "MpiCommunicator::reduce_scatter_start (uneven): the block at its own offset";
    std::vector<float> ag(total, -1.0f);
    for (size_t i = 0; i < counts[rank]; ++i) ag[offset + i] = static_cast<float>(rank * 1000 + i);
    DeviceVec<float> dag(ag, stream);
    dev.wait(dev.all_gather_start(dag.get(), counts));
    mpi.wait(mpi.all_gather_start(ag.data(), counts));
    EXPECT_EQ(dag.host(stream), ag) << "all_gather_start (uneven)";
  }
  check_two_byte(dev, mpi, stream);
  EXPECT_EQ(dev.bytes_sent(), mpi.bytes_sent());
  EXPECT_EQ(dev.bytes_sent() == 0, size == 1);
}

}  // namespace comm_checks
