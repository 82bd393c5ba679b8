// comm-bench: collective bandwidth over the trainer's own Communicator, in the style of
// nccl-tests.
//
//   mpirun -np N comm-bench [--dp D --tp T --pp P] [--group world|dp|tp|pp]
//     [--op all_reduce|all_gather|reduce_scatter|broadcast|sendrecv|all] [--min-bytes 8]
//     [--max-bytes 64M] [--factor 2] [--iters 20] [--warmup 5] [--check 1]
//
// The world is laid out as the trainer's Grid (Megatron order) and every group of the chosen kind
// runs at once, as in training. Per size: time = mean over iterations of the slowest rank's time;
// algbw = S / time; busbw = algbw x factor (nccl-tests' definitions; S is the whole output of
// all_gather and the whole input of reduce_scatter). Data are small integers, so every correct
// result is exact and #wrong counts the elements that differ, over all ranks and iterations.
// --max-bytes is bounded by memory: three buffers of it must fit in a rank's share of the host's
// available memory. Exit code: 0 all correct, 1 a wrong value or a failure, 2 bad options.
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "mpitrain/runtime/program.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/monitor/memory.hpp"
#include "mpitrain/planner/memory.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/grid.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

enum class Op { AllReduce, AllGather, ReduceScatter, Broadcast, SendRecv };
constexpr Op kAllOps[] = {Op::AllReduce, Op::AllGather, Op::ReduceScatter, Op::Broadcast,
                          Op::SendRecv};
const char* name(Op op) {
  constexpr const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast",
                                   "sendrecv"};
  return names[static_cast<int>(op)];
}

struct Options {
  int dp = 0, tp = 0, pp = 0;
  std::string group = "world";
  std::vector<Op> ops;
  size_t min_bytes = 8, max_bytes = 64 << 20;
  int factor = 2, iters = 20, warmup = 5, check = 1;
  bool help = false;
  std::string help_text;
};

// "8", "64K", "64M", "1G" (powers of 1024, as nccl-tests reads them).
size_t parse_bytes(const std::string& text, const char* option) {
  size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  const std::string suffix = pos ? text.substr(pos) : "";
  int shift = -1;
  if (suffix.empty())
    shift = 0;
  else if (suffix == "K" || suffix == "k")
    shift = 10;
  else if (suffix == "M" || suffix == "m")
    shift = 20;
  else if (suffix == "G" || suffix == "g")
    shift = 30;
  require(pos > 0 && shift >= 0 && value > 0 && value < (1ull << (63 - shift)),
          std::string("--") + option + " '" + text + "' is not a positive size (e.g. 8, 64K, 64M)");
  return static_cast<size_t>(value << shift);
}

Options parse_options(int argc, char** argv) {
  Options o;
  std::string op = "all_reduce", min_bytes = "8", max_bytes = "64M";
  po::options_description desc(
      "comm-bench: collective bandwidth over mpitrain's communicator (nccl-tests style)\n"
      "usage: mpirun -np N comm-bench [options]\noptions");
  desc.add_options()("help,h", "show this help")("dp", po::value(&o.dp)->default_value(0),
                                                 "data-parallel size (0: derived)")(
      "tp", po::value(&o.tp)->default_value(0), "tensor-parallel size (0: derived)")(
      "pp", po::value(&o.pp)->default_value(0), "pipeline-parallel size (0: derived)")(
      "group", po::value(&o.group)->default_value("world"), "world, dp, tp or pp")(
      "op", po::value(&op)->default_value("all_reduce"),
      "all_reduce, all_gather, reduce_scatter, broadcast, sendrecv or all")(
      "min-bytes", po::value(&min_bytes)->default_value("8"), "smallest size S (K, M, G suffixes)")(
      "max-bytes", po::value(&max_bytes)->default_value("64M"), "largest size S")(
      "factor", po::value(&o.factor)->default_value(2), "size multiplier between rows, >= 2")(
      "iters", po::value(&o.iters)->default_value(20), "timed iterations per size")(
      "warmup", po::value(&o.warmup)->default_value(5), "untimed iterations per size")(
      "check", po::value(&o.check)->default_value(1), "1: verify every iteration's result");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  if (vm.count("help")) {
    o.help = true;
    std::ostringstream text;
    text << desc << "\n";
    o.help_text = text.str();
    return o;
  }
  for (Op candidate : kAllOps)
    if (op == "all" || op == name(candidate)) o.ops.push_back(candidate);
  require(!o.ops.empty(), "--op '" + op +
                              "' is not one of all_reduce, all_gather, "
                              "reduce_scatter, broadcast, sendrecv, all");
  require(o.group == "world" || o.group == "dp" || o.group == "tp" || o.group == "pp",
          "--group '" + o.group + "' is not one of world, dp, tp, pp");
  o.min_bytes = parse_bytes(min_bytes, "min-bytes");
  o.max_bytes = parse_bytes(max_bytes, "max-bytes");
  require(o.min_bytes <= o.max_bytes, "--min-bytes is larger than --max-bytes");
  require(o.max_bytes >= sizeof(float),
          "--max-bytes " + std::to_string(o.max_bytes) + " holds no float: nothing to measure");
  require(o.factor >= 2, "--factor must be at least 2");
  require(o.iters >= 1 && o.warmup >= 0, "--iters must be at least 1 and --warmup at least 0");
  require(o.check == 0 || o.check == 1, "--check must be 0 or 1");
  return o;
}

// Element i of group rank r's data: a small integer, so sums over ranks are exact.
float value(int r, size_t i) { return static_cast<float>(static_cast<int>((r * 7 + i) % 13) - 6); }
constexpr float kUnwritten = 1e9f;  // fills outputs, so that a missing result counts as wrong

// One op at one size on one group: fills, runs and checks; buffers sized once for the largest.
class Bench {
 public:
  Bench(Communicator& comm, size_t max_floats)
      : comm_(comm), a_(max_floats), b_(max_floats), expect_(max_floats) {}

  // Elements per rank (nccl-tests' count column) for S bytes; 0: too small for this group.
  size_t count(Op op, size_t bytes) const {
    const bool split = op == Op::AllGather || op == Op::ReduceScatter;
    return bytes / sizeof(float) / (split ? comm_.size() : 1);
  }
  // S: bytes the algbw is measured on.
  size_t bytes(Op op, size_t count) const {
    const bool split = op == Op::AllGather || op == Op::ReduceScatter;
    return count * sizeof(float) * (split ? comm_.size() : 1);
  }

  void expect(Op op, size_t count) {
    const int r = comm_.rank(), n = comm_.size();
    for (size_t i = 0; i < count * (op == Op::AllGather ? n : 1); ++i) {
      float sum = 0;
      switch (op) {
        case Op::AllReduce:
          for (int q = 0; q < n; ++q) sum += value(q, i);
          break;
        case Op::ReduceScatter:
          for (int q = 0; q < n; ++q) sum += value(q, r * count + i);
          break;
        case Op::AllGather:
          sum = value(static_cast<int>(i / count), i % count);
          break;
        case Op::Broadcast:
          sum = value(0, i);
          break;
        case Op::SendRecv:
          sum = value((r - 1 + n) % n, i);
          break;
      }
      expect_[i] = sum;
    }
  }

  void fill(Op op, bool in_place, size_t count) {
    const int r = comm_.rank(), n = comm_.size();
    float *a = a_.data(), *b = b_.data();
    switch (op) {
      case Op::AllReduce:
      case Op::SendRecv:
        for (size_t i = 0; i < count; ++i) a[i] = value(r, i);
        std::fill(b, b + count, kUnwritten);
        break;
      case Op::Broadcast:
        for (size_t i = 0; i < count; ++i) a[i] = r == 0 ? value(0, i) : kUnwritten;
        break;
      case Op::AllGather:
        std::fill(b, b + n * count, kUnwritten);
        for (size_t i = 0; i < count; ++i) (in_place ? b + r * count : a)[i] = value(r, i);
        break;
      case Op::ReduceScatter:
        for (size_t i = 0; i < n * count; ++i) a[i] = value(r, i);
        std::fill(b, b + count, kUnwritten);
        break;
    }
  }

  void execute(Op op, bool in_place, size_t count) {
    const int r = comm_.rank(), n = comm_.size();
    float *a = a_.data(), *b = b_.data();
    switch (op) {
      case Op::AllReduce:
        comm_.all_reduce(a, count, ReduceOp::Sum);
        break;
      case Op::AllGather:
        comm_.all_gather(in_place ? b + r * count : a, b, count);
        break;
      case Op::ReduceScatter:
        comm_.reduce_scatter(a, in_place ? a + r * count : b, count, ReduceOp::Sum);
        break;
      case Op::Broadcast:
        comm_.broadcast(a, count * sizeof(float), 0);
        break;
      case Op::SendRecv: {
        const CommHandle recv = comm_.recv_start(b, count, (r - 1 + n) % n, 0);
        const CommHandle send = comm_.send_start(a, count, (r + 1) % n, 0);
        comm_.wait(send);
        comm_.wait(recv);
        break;
      }
    }
  }

  // Elements of this rank's result that differ from expect_.
  int64_t wrong(Op op, bool in_place, size_t count) const {
    const int r = comm_.rank();
    const float* got = b_.data();
    size_t len = count;
    if (op == Op::AllReduce || op == Op::Broadcast) got = a_.data();
    if (op == Op::ReduceScatter && in_place) got = a_.data() + r * count;
    if (op == Op::AllGather) len = count * comm_.size();
    int64_t bad = 0;
    for (size_t i = 0; i < len; ++i) bad += got[i] != expect_[i];
    return bad;
  }

 private:
  Communicator& comm_;
  std::vector<float> a_, b_, expect_;  // a: input (in place: all), b: output, expect_: result
};

struct Cell {
  double us = 0;
  int64_t wrong = -1;  // -1: not checked
};

// Runs warmup + iters iterations on every rank; the world agrees on time and #wrong.
Cell measure(Bench& bench, Op op, bool in_place, size_t count, const Options& o) {
  if (o.check) bench.expect(op, count);
  std::vector<double> us(o.iters);
  int64_t wrong = 0;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    bench.fill(op, in_place, count);
    MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD));
    const auto t0 = std::chrono::steady_clock::now();
    bench.execute(op, in_place, count);
    const auto t1 = std::chrono::steady_clock::now();
    if (it >= o.warmup)
      us[it - o.warmup] = std::chrono::duration<double, std::micro>(t1 - t0).count();
    if (o.check) wrong += bench.wrong(op, in_place, count);
  }
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, us.data(), o.iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD));
  Cell cell;
  for (double t : us) cell.us += t / o.iters;
  if (o.check) cell.wrong = wrong;
  return cell;
}

double bus_factor(Op op, int n) {
  switch (op) {
    case Op::AllReduce:
      return 2.0 * (n - 1) / n;
    case Op::AllGather:
    case Op::ReduceScatter:
      return static_cast<double>(n - 1) / n;
    case Op::Broadcast:
    case Op::SendRecv:
      return 1;
  }
  return 1;
}

// nccl-tests' cell layout: time, algbw, busbw, #wrong.
void print_cell(const Cell* cell, size_t bytes, double factor) {
  if (!cell) {
    std::printf("  %7s  %6s  %6s  %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  const char* time_format = cell->us >= 10000 ? "  %7.0f" : cell->us >= 100 ? "  %7.1f" : "  %7.2f";
  std::printf(time_format, cell->us);
  const double algbw = bytes / (cell->us * 1e-6) / 1e9;
  std::printf("  %6.2f  %6.2f", algbw, algbw * factor);
  if (cell->wrong < 0)
    std::printf("  %6s", "N/A");
  else
    std::printf("  %6lld", static_cast<long long>(cell->wrong));
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ranks[i]);
  }
  s += ']';
  return s;
}

// One line per world rank: where it runs and its grid coordinates.
void print_ranks(const Grid& grid, bool root) {
  int mine[4] = {static_cast<int>(getpid()), grid.dp_rank(), grid.tp_rank(), grid.pp_rank()};
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_CHECK(MPI_Get_processor_name(host, &len));
  int world = 0;
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &world));
  std::vector<int> all(root ? 4 * world : 0);
  std::vector<char> hosts(root ? world * MPI_MAX_PROCESSOR_NAME : 0);
  MPI_CHECK(MPI_Gather(mine, 4, MPI_INT, all.data(), 4, MPI_INT, 0, MPI_COMM_WORLD));
  MPI_CHECK(MPI_Gather(host, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, hosts.data(), MPI_MAX_PROCESSOR_NAME,
                       MPI_CHAR, 0, MPI_COMM_WORLD));
  for (int r = 0; root && r < world; ++r)
    std::printf("#  Rank %3d Pid %7d on %10s  dp %d tp %d pp %d\n", r, all[4 * r],
                &hosts[r * MPI_MAX_PROCESSOR_NAME], all[4 * r + 1], all[4 * r + 2], all[4 * r + 3]);
}

int run(int argc, char** argv) {
  const MpiComm world = MpiComm::world();
  const bool root = world.rank() == 0;
  const int ranks_here = world.split_shared().size();
  Options o;
  GridShape shape;
  try {
    all_or_none(world, [&] {
      o = parse_options(argc, argv);
      if (o.help) return;
      shape = resolve_grid(world.size(), o.dp, o.tp, o.pp);
      // Bench's three buffers of --max-bytes, against this rank's share of the host's memory.
      const double room = available_memory_bytes() / ranks_here;
      require(3.0 * o.max_bytes <= room,
              "--max-bytes " + std::to_string(o.max_bytes) + " needs three buffers of it, " +
                  memory_text(3.0 * o.max_bytes) + " per rank; a rank has " + memory_text(room) +
                  " (available memory / " + std::to_string(ranks_here) +
                  " ranks on this host): --max-bytes " +
                  std::to_string(static_cast<long long>(room / 3 / (1 << 20))) + "M at most");
    });
  } catch (const UsageError& e) {
    if (root) std::fprintf(stderr, "comm-bench: error: %s\n", e.what());
    return kExitUsage;
  }
  if (o.help) {
    if (root) std::printf("%s", o.help_text.c_str());
    return kExitOk;
  }

  const Grid grid(world, shape);
  const Group kind = o.group == "dp" ? Group::Dp : o.group == "tp" ? Group::Tp : Group::Pp;
  const MPI_Comm group_comm = o.group == "world" ? MPI_COMM_WORLD
                              : o.group == "dp"  ? grid.dp().get()
                              : o.group == "tp"  ? grid.tp().get()
                                                 : grid.pp().get();
  MpiCommunicator comm(group_comm);
  const int n = comm.size();
  std::vector<int> my_group(world.size());
  for (int r = 0; r < world.size(); ++r) my_group[r] = r;
  if (o.group != "world") my_group = Grid::members(shape, kind, world.rank());
  Bench bench(comm, o.max_bytes / sizeof(float));

  if (root) {
    std::printf(
        "# comm-bench (mpitrain %s): minBytes %zu maxBytes %zu step: %d(factor) warmup "
        "iters: %d iters: %d validation: %d\n#\n",
        MPITRAIN_VERSION, o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters, o.check);
    std::printf("# world %d ranks, layout dp %d x tp %d x pp %d (rank = tp + TP*(dp + DP*pp))\n",
                world.size(), shape.dp, shape.tp, shape.pp);
  }
  print_ranks(grid, root);

  double busbw_sum = 0;
  int busbw_cells = 0;
  int64_t wrong_total = 0;
  for (Op op : o.ops) {
    const bool out_of_place = op == Op::AllGather || op == Op::ReduceScatter || op == Op::SendRecv;
    const bool in_place = op != Op::SendRecv;
    const bool reduces = op == Op::AllReduce || op == Op::ReduceScatter;
    if (root) {
      std::printf(
          "#\n# %s on group %s: n = %d, layout dp %d x tp %d x pp %d, %d group(s) at once, "
          "rank 0's %s\n",
          name(op), o.group.c_str(), n, shape.dp, shape.tp, shape.pp, world.size() / n,
          ranks_text(my_group).c_str());
      std::printf("#%73s%32s\n", "out-of-place", "in-place");
      std::printf("#%11s  %12s  %8s  %6s  %6s", "size", "count", "type", "redop", "root");
      for (int m = 0; m < 2; ++m)
        std::printf("  %7s  %6s  %6s  %6s", "time", "algbw", "busbw", "#wrong");
      std::printf("\n#%11s  %12s  %8s  %6s  %6s", "(B)", "(elements)", "", "", "");
      for (int m = 0; m < 2; ++m)
        std::printf("  %7s  %6s  %6s  %6s", "(us)", "(GB/s)", "(GB/s)", "");
      std::printf("\n");
    }
    for (size_t s = o.min_bytes; s <= o.max_bytes; s *= o.factor) {
      const size_t count = bench.count(op, s);
      if (count == 0) continue;
      Cell cells[2];
      if (out_of_place) cells[0] = measure(bench, op, false, count, o);
      if (in_place) cells[1] = measure(bench, op, true, count, o);
      const size_t bytes = bench.bytes(op, count);
      const double factor = bus_factor(op, n);
      for (int m = 0; m < 2; ++m) {
        if (!(m ? in_place : out_of_place)) continue;
        busbw_sum += bytes / (cells[m].us * 1e-6) / 1e9 * factor;
        ++busbw_cells;
        wrong_total += std::max<int64_t>(0, cells[m].wrong);
      }
      if (!root) continue;
      std::printf("%12zu  %12zu  %8s  %6s  %6d", bytes, count, "float", reduces ? "sum" : "none",
                  op == Op::Broadcast ? 0 : -1);
      print_cell(out_of_place ? &cells[0] : nullptr, bytes, factor);
      print_cell(in_place ? &cells[1] : nullptr, bytes, factor);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  if (root) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total),
                wrong_total ? "FAILED" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n#\n", busbw_cells ? busbw_sum / busbw_cells : 0.0);
  }
  return wrong_total ? kExitFailure : kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return mpitrain::mpi_program("comm-bench", argc, argv, run); }
