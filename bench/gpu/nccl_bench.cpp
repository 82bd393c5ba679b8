// nccl-bench: NcclCommunicator's collectives in the style of nccl-tests, one GPU per rank.
//
//   mpirun -np N nccl-bench [max-bytes] [iters]      max-bytes "8", "64K", "256M" (default 256M),
//                                                     iters per size (default 20, after 5 warm-up)
//
// Sizes 8 B .. max-bytes by factors of 2, float data. Per size and op: time = the slowest rank's
// mean over the iterations of the blocking call (the host waits for completion, as the trainer's
// blocking calls do); algbw = S / time (GB/s, 1e9); busbw = algbw x factor (REFERENCE.md):
// all_reduce 2(n-1)/n, all_gather (n-1)/n with S the whole output, reduce_scatter (n-1)/n with S
// the whole input, broadcast 1. all_reduce and broadcast are in place (the Communicator's only
// form), all_gather and reduce_scatter out of place. After the timing, one call on fresh small
// integers is checked exactly: #wrong counts the wrong elements over all ranks.
// Prints "SKIP: <why>" and exits 0 with one rank, or where a node has fewer GPUs than ranks.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../bench_args.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda/device.hpp"
#include "mpitrain/comm/nccl_communicator.hpp"
#include "mpitrain/runtime/device.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

using namespace mpitrain;

namespace {

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast };

size_t parse_bytes(const std::string& text) {
  size_t pos = 0, value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string unit = text.substr(pos);
  const size_t scale = unit == "" ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20
                                      : unit == "G" ? size_t{1} << 30 : 0;
  if (pos == 0 || scale == 0 || value == 0)
    throw UsageError("max-bytes '" + text + "' is not a size like 8, 64K, 256M, 1G");
  return value * scale;
}

struct Buffers {
  float *in = nullptr, *out = nullptr;
  Buffers(size_t in_n, size_t out_n) {
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&in), in_n * sizeof(float)));
    CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&out), out_n * sizeof(float)));
  }
  ~Buffers() {
    cudaFree(in);
    cudaFree(out);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
};

// One call of op on count elements per rank (all_gather: count in, size*count out;
// reduce_scatter: size*count in, count out).
void call(NcclCommunicator& nccl, Op op, Buffers& b, size_t count) {
  switch (op) {
    case Op::AllReduce: nccl.all_reduce(b.in, count, ReduceOp::Sum); break;
    case Op::AllGather: nccl.all_gather(b.in, b.out, count); break;
    case Op::ReduceScatter: nccl.reduce_scatter(b.in, b.out, count, ReduceOp::Sum); break;
    case Op::Broadcast: nccl.broadcast(b.in, count * sizeof(float), 0); break;
  }
}

// Fresh data (value of element i on rank r: (r + 1) * (i % 7 + 1)), one call, and the number of
// wrong elements of the result on this rank.
long long check(NcclCommunicator& nccl, Op op, Buffers& b, size_t count, cudaStream_t compute) {
  const int n = nccl.size(), r = nccl.rank();
  const size_t in_n = op == Op::ReduceScatter ? n * count : count;
  std::vector<float> in(in_n);
  for (size_t i = 0; i < in_n; ++i) in[i] = static_cast<float>((r + 1) * (i % 7 + 1));
  CUDA_CHECK(cudaMemcpy(b.in, in.data(), in_n * sizeof(float), cudaMemcpyHostToDevice));
  call(nccl, op, b, count);
  CUDA_CHECK(cudaStreamSynchronize(compute));
  const bool in_place = op == Op::AllReduce || op == Op::Broadcast;
  const size_t out_n = op == Op::AllGather ? n * count : count;
  std::vector<float> out(out_n);
  CUDA_CHECK(cudaMemcpy(out.data(), in_place ? b.in : b.out, out_n * sizeof(float),
                        cudaMemcpyDeviceToHost));
  const double ranks_sum = n * (n + 1) / 2.0;
  long long wrong = 0;
  for (size_t i = 0; i < out_n; ++i) {
    double want = 0;
    switch (op) {
      case Op::AllReduce: want = ranks_sum * (i % 7 + 1); break;
      case Op::AllGather: want = static_cast<double>(i / count + 1) * (i % count % 7 + 1); break;
      case Op::ReduceScatter: want = ranks_sum * ((r * count + i) % 7 + 1); break;
      case Op::Broadcast: want = static_cast<double>(i % 7 + 1); break;
    }
    wrong += out[i] != want;
  }
  return wrong;
}

int run(int argc, char** argv) {
  if (argc > 3) throw UsageError("usage: nccl-bench [max-bytes] [iters]");
  const size_t max_bytes = argc > 1 ? parse_bytes(argv[1]) : size_t{256} << 20;
  int iters = 20;
  if (argc > 2 && !bench::parse_positive(argv[2], &iters))
    throw UsageError(std::string("iters needs a whole number from 1 to 10^6, not '") + argv[2] +
                     "'");
  const MpiComm& world = MpiComm::world();
  const MpiComm node = world.split_shared();
  const cuda::DeviceProbe probe = cuda::probe_devices();
  int skip = world.size() < 2 || probe.count < node.size() ? 1 : 0;
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &skip, 1, MPI_INT, MPI_MAX, world.get()));
  if (skip) {
    if (world.rank() == 0)
      std::printf("SKIP: %s\n", world.size() < 2 ? "one rank: nothing to communicate"
                                : probe.count == 0
                                    ? probe.reason.c_str()
                                    : "a node has fewer GPUs than ranks (one GPU per rank)");
    return 0;
  }
  select_device(node.rank(), node.size());
  const std::vector<DeviceInfo> table = gather_device_table(device_info(world.rank()), world.get());
  if (world.rank() == 0) std::printf("%s", format_device_table(table).c_str());

  cudaStream_t compute = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
  int rc = 0;
  {
    NcclCommunicator nccl(world.get(), "world", compute);
    const int n = nccl.size();
    const size_t max_count = max_bytes / sizeof(float);
    Buffers buffers(n * max_count, n * max_count);
    const struct { Op op; const char* name; double factor; bool whole; } ops[] = {
        {Op::AllReduce, "all_reduce", 2.0 * (n - 1) / n, false},
        {Op::AllGather, "all_gather", (n - 1.0) / n, true},
        {Op::ReduceScatter, "reduce_scatter", (n - 1.0) / n, true},
        {Op::Broadcast, "broadcast", 1.0, false},
    };
    double busbw_total = 0;
    int rows = 0;
    long long wrong_total = 0;
    for (const auto& o : ops) {
      if (world.rank() == 0)
        std::printf("\n# %s, %d ranks\n%12s %12s %6s %6s %5s %10s %8s %8s %7s\n", o.name, n,
                    "size(B)", "count", "type", "redop", "root", "time(us)", "algbw", "busbw",
                    "#wrong");
      for (size_t count = 2; count <= max_count; count *= 2) {
        const size_t bytes = (o.whole ? n : 1) * count * sizeof(float);  // S
        for (int i = 0; i < 5; ++i) call(nccl, o.op, buffers, count);
        const double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) call(nccl, o.op, buffers, count);
        double seconds = (MPI_Wtime() - t0) / iters;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, world.get()));
        long long wrong = check(nccl, o.op, buffers, count, compute);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG_LONG, MPI_SUM, world.get()));
        const double algbw = bytes / seconds / 1e9, busbw = algbw * o.factor;
        busbw_total += busbw;
        ++rows;
        wrong_total += wrong;
        if (world.rank() == 0)
          std::printf("%12zu %12zu %6s %6s %5s %10.1f %8.2f %8.2f %7lld\n", bytes,
                      bytes / sizeof(float), "float",
                      o.op == Op::AllReduce || o.op == Op::ReduceScatter ? "sum" : "none",
                      o.op == Op::Broadcast ? "0" : "-1", seconds * 1e6, algbw, busbw, wrong);
      }
    }
    if (world.rank() == 0) std::printf("\n# Avg bus bandwidth    : %.3f\n", busbw_total / rows);
    rc = wrong_total > 0 ? 1 : 0;
  }
  CUDA_CHECK(cudaStreamDestroy(compute));
  return rc;
}

}  // namespace

int main(int argc, char** argv) { return mpitrain::mpi_program("nccl-bench", argc, argv, run); }
