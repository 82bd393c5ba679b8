// ckpt-bench: write and read bandwidth of a parallel-HDF5 checkpoint (CheckpointStore) against
// a plain sequential write of the same bytes to the same disk, in the same run.
//
//   mpirun -np N ckpt-bench [--dir D] [--gib 1.0] [--tp T] [--pp P] [--repeats 3]
//
// The model: GPT-2, d_model 1024, 16 heads, d_ff 4096, vocab 8192, 1024 positions, with n_layer
// chosen so that params + adam_m + adam_v (12 bytes per parameter) of the WHOLE model come
// closest to --gib GiB (at least pp layers; below what the embeddings alone take, d_model is
// halved, down to 128, with vocab 8 d_model). The layout is dp x tp x pp with dp = N / (tp pp);
// each rank builds its shard's ParamLayout (shard_of, pipeline_layer_split) and fills params,
// adam_m and adam_v with deterministic values that depend only on (buffer, tensor, element's
// index in the full tensor), so every replica and every copy of a tensor holds the same values.
//
// Each repeat times, in an order that rotates between repeats:
//   write: CheckpointStore::save (the whole commit: collective write and close, fsync of the file
//          and its directory, rename, `latest` written durably) — slowest rank, from a barrier;
//   read:  CheckpointStore::load of that directory (collective read of every rank's pieces and
//          checksum verification) into zeroed buffers, then (untimed) every element compared
//          with the values it was saved with; #wrong counts differences over all ranks;
//   dd:    on rank 0 only, while the others wait without spinning: the same number of bytes as
//          the checkpoint file, written as `dd if=/dev/zero of=D/dd.bin bs=16M conv=fsync` does
//          it — open(O_CREAT|O_TRUNC), write() of a zeroed 16 MiB buffer, fsync(), close() —
//          done in-process rather than by running dd (equivalent, and no fork under MPI).
// Before each timed operation rank 0 calls sync() (untimed), so no earlier dirty data is flushed
// inside it. Between repeats the previous step directory and dd.bin are removed (untimed), so
// pruning is not part of the write time. Caches cannot be dropped here: the read comes from the
// page cache (the file was just written), so it measures HDF5 + MPI-IO + checksum cost, not the
// disk.
//
// GB/s = checkpoint file bytes / seconds / 1e9 (dd: the same bytes). Best and median of the
// repeats; write/dd is the ratio of the medians (and of the bests). Goal write/dd >= 0.70,
// informational. The last line is machine-readable ("RESULT key=value ..."). Everything it writes
// under D (D/checkpoints, D/dd.bin) is removed at the end. Exit code: 0, 1 (a wrong element or a
// failure), 2 (bad options).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/model/params.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/program.hpp"
#include "mpitrain/train/gather.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace mpitrain;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr size_t kDdBlock = 16u << 20;  // dd bs=16M
constexpr double kGoal = 0.70;

struct Options {
  std::string dir = ".";
  double gib = 1.0;
  int tp = 1, pp = 1, repeats = 3;
};

bool parse(int argc, char** argv, bool root, Options& o, int& code) {
  po::options_description desc(
      "ckpt-bench — checkpoint save/load GB/s vs a plain write+fsync of the same bytes\n\n"
      "Usage: mpirun -np N ckpt-bench [options]\n\nOptions");
  desc.add_options()("help,h", "print this help and exit")(
      "dir", po::value(&o.dir)->default_value(o.dir),
      "scratch directory (D/checkpoints and D/dd.bin, which must not exist: removed at the "
      "end)")("gib", po::value(&o.gib)->default_value(o.gib),
              "params + adam_m + adam_v of the model, GiB")(
      "tp", po::value(&o.tp)->default_value(o.tp), "tensor-parallel ranks")(
      "pp", po::value(&o.pp)->default_value(o.pp), "pipeline stages")(
      "repeats", po::value(&o.repeats)->default_value(o.repeats), "timed repeats");
  try {
    po::variables_map vm;
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
    if (vm.count("help")) {
      if (root) std::cout << desc << "\n";
      code = 0;
      return false;
    }
    if (!(o.gib > 0)) throw std::invalid_argument("--gib must be > 0");
    if (o.tp < 1 || o.pp < 1) throw std::invalid_argument("--tp and --pp must be >= 1");
    if (o.repeats < 1) throw std::invalid_argument("--repeats must be >= 1");
  } catch (const std::exception& e) {
    if (root) std::fprintf(stderr, "ckpt-bench: %s\n", e.what());
    code = kExitUsage;
    return false;
  }
  return true;
}

// GPT-2 sized to `gib` of params + m + v (see the top of the file).
ModelConfig model_for(double gib, int pp) {
  const double target_params = gib * kGiB / 12.0;
  ModelConfig c;
  c.arch = Arch::Gpt2;
  for (int d = 1024;; d /= 2) {
    c.d_model = d;
    c.n_head = d / 64;
    c.n_kv_head = c.n_head;
    c.d_ff = 4 * d;
    c.vocab_size = 8 * d;
    c.max_seq_len = d;
    c.n_layer = 1;
    const ParamLayout one(c);
    c.n_layer = 2;
    const double per_layer = static_cast<double>(ParamLayout(c).total() - one.total());
    const double outside = static_cast<double>(one.total()) - per_layer;
    const double layers = (target_params - outside) / per_layer;
    if (layers + 0.5 >= pp || d <= 128) {
      c.n_layer = std::max(pp, static_cast<int>(std::lround(layers)));
      return c;
    }
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The value of element i of the full tensor k of buffer g: exact in float, in [-0.5, 0.5).
void fill_full(int g, int k, std::vector<float>& full) {
  const uint64_t key = (static_cast<uint64_t>(g) << 56) ^ (static_cast<uint64_t>(k) << 40);
  float* p = full.data();
  const size_t n = full.size();
  for (size_t i = 0; i < n; ++i)
    p[i] = static_cast<float>(splitmix64(key ^ i) >> 40) * (1.0f / 16777216.0f) - 0.5f;
}

// Fills (expect == false) or compares with (expect == true) this rank's three buffers; returns
// the number of differing elements.
int64_t fill_or_check(const ModelConfig& cfg, const ParamLayout& layout, float* const buffers[3],
                      bool check) {
  const ParamLayout whole(cfg);
  std::vector<float> full, local;
  int64_t wrong = 0;
  for (int g = 0; g < 3; ++g)
    for (const ParamTensor& t : layout.tensors()) {
      full.resize(whole.tensors()[t.global_index].numel);
      fill_full(g, t.global_index, full);
      float* dst = buffers[g] + t.offset;
      if (!check) {
        take_shard(t, full.data(), dst);
        continue;
      }
      local.resize(t.numel);
      take_shard(t, full.data(), local.data());
      for (size_t i = 0; i < t.numel; ++i) wrong += std::memcmp(&dst[i], &local[i], 4) != 0;
    }
  return wrong;
}

// A barrier in which the waiting ranks sleep instead of polling (2 cores: spinning ranks would
// take CPU from rank 0's dd).
void idle_barrier(MPI_Comm comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm, &request));
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

// What dd if=/dev/zero of=path bs=16M conv=fsync writes, for `bytes` bytes.
void dd_write(const std::string& path, uint64_t bytes, const std::vector<char>& block) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) MPITRAIN_THROW("open " + path + ": " + std::strerror(errno));
  for (uint64_t left = bytes; left > 0;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, block.size()));
    const ssize_t w = ::write(fd, block.data(), n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) MPITRAIN_THROW("write " + path + ": " + std::strerror(errno));
    left -= static_cast<uint64_t>(w);
  }
  if (::fsync(fd) != 0) MPITRAIN_THROW("fsync " + path + ": " + std::strerror(errno));
  if (::close(fd) != 0) MPITRAIN_THROW("close " + path + ": " + std::strerror(errno));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

int run(int argc, char** argv) {
  const MpiComm world = MpiComm::world();
  const bool root = world.rank() == 0;
  Options o;
  int code = 0;
  if (!parse(argc, argv, root, o, code)) return code;
  if (world.size() % (o.tp * o.pp) != 0) {
    if (root)
      std::fprintf(stderr, "ckpt-bench: %d ranks are not a multiple of tp x pp = %d\n",
                   world.size(), o.tp * o.pp);
    return kExitUsage;
  }

  // Never into a user's run: D/checkpoints and D/dd.bin are written and removed (rank 0 looks,
  // before any rank writes, and says).
  int taken = 0;
  if (root)
    for (const char* name : {"checkpoints", "dd.bin"}) {
      std::error_code ec;
      if (taken || !fs::exists(fs::symlink_status(fs::path(o.dir) / name, ec))) continue;
      std::fprintf(stderr,
                   "ckpt-bench: --dir %s already holds %s, which ckpt-bench writes and removes: "
                   "give a directory without checkpoints/ and dd.bin (a new one is made)\n",
                   o.dir.c_str(), name);
      taken = 1;
    }
  MPI_CHECK(MPI_Bcast(&taken, 1, MPI_INT, 0, world.get()));
  if (taken) return kExitUsage;

  const ModelConfig cfg = model_for(o.gib, o.pp);
  cfg.validate();
  if (cfg.n_head % o.tp != 0) {
    if (root) std::fprintf(stderr, "ckpt-bench: tp %d does not divide %d heads\n", o.tp, cfg.n_head);
    return kExitUsage;
  }
  const GridShape shape = resolve_grid(world.size(), 0, o.tp, o.pp);
  const Grid grid(world, shape);
  const std::vector<int> split = pipeline_layer_split(cfg.n_layer, shape.pp, "");
  const ParamLayout layout(cfg, shard_of(shape, split, grid.tp_rank(), grid.pp_rank()));
  const uint64_t model_params = ParamLayout(cfg).total();
  const double state_gib = 12.0 * static_cast<double>(model_params) / kGiB;

  std::vector<float> params(layout.total()), adam_m(layout.total()), adam_v(layout.total());
  float* const buffers[3] = {params.data(), adam_m.data(), adam_v.data()};
  fill_or_check(cfg, layout, buffers, false);
  // AdamW's state over the whole buffer, no ZeRO, fp32 (the master is params).
  const ShardRanges whole = ShardRanges::whole(layout.total());
  const CheckpointState state{cfg,
                              layout,
                              params.data(),
                              whole,
                              whole,
                              params.data(),
                              false,
                              OptimizerKind::AdamW,
                              {adam_m.data(), adam_v.data()},
                              Precision::Fp32,
                              grid.dp_rank() == 0};

  const fs::path dir = fs::absolute(o.dir);
  const std::string store_dir = (dir / "checkpoints").string();
  const std::string dd_path = (dir / "dd.bin").string();
  if (root) {
    fs::create_directories(dir);
  }
  MPI_CHECK(MPI_Barrier(world.get()));
  CheckpointStore store(store_dir, world);

  CheckpointManifest manifest;
  manifest.seed = 1234;
  manifest.model = cfg;
  manifest.layout = shape;
  manifest.global_batch_size = shape.dp;
  manifest.micro_batch_size = 1;
  manifest.seq_len = cfg.max_seq_len;

  if (root) {
    std::printf(
        "# ckpt-bench: %d ranks (dp %d tp %d pp %d), GPT-2 L%d H%d C%d F%d V%d T%d: %llu "
        "parameters, params+adam_m+adam_v %.3f GiB; %d repeats; dir %s\n",
        world.size(), shape.dp, shape.tp, shape.pp, cfg.n_layer, cfg.n_head, cfg.d_model,
        cfg.d_ff, cfg.vocab_size, cfg.max_seq_len, static_cast<unsigned long long>(model_params),
        state_gib, o.repeats, dir.c_str());
    std::fflush(stdout);
  }

  std::vector<char> block(kDdBlock, 0);
  std::vector<double> t_write, t_read, t_dd;
  uint64_t file_bytes = 0;
  int64_t wrong = 0;
  std::string previous;
  for (int rep = 0; rep < o.repeats; ++rep) {
    // Untimed cleanup of the previous repeat.
    if (root) {
      if (!previous.empty()) fs::remove_all(previous);
      fs::remove(dd_path);
    }
    manifest.step = rep + 1;
    manifest.consumed_samples = static_cast<uint64_t>(rep + 1) * shape.dp;
    manifest.adam_steps = rep + 1;
    std::string path;
    // The order rotates: W R D, D W R, W D R (W = write, R = read of it, D = dd); the first
    // repeat writes first, so dd knows the file's size.
    static const char* const kOrders[3] = {"WRD", "DWR", "WDR"};
    for (const char* op = kOrders[rep % 3]; *op; ++op) {
      if (*op == 'D') {
        if (root) {
          ::sync();
          const auto start = std::chrono::steady_clock::now();
          dd_write(dd_path, file_bytes, block);
          t_dd.push_back(seconds_since(start));
        }
        idle_barrier(world.get());
      } else if (*op == 'W') {
        if (root) ::sync();
        MPI_CHECK(MPI_Barrier(world.get()));
        const auto start = std::chrono::steady_clock::now();
        path = store.save(manifest, state);
        double t = seconds_since(start);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, world.get()));
        t_write.push_back(t);
        if (root) file_bytes = fs::file_size(fs::path(path) / "checkpoint.h5");
        MPI_CHECK(MPI_Bcast(&file_bytes, 1, MPI_UINT64_T, 0, world.get()));
      } else {
        for (float* b : buffers) std::fill_n(b, layout.total(), 0.0f);
        if (root) ::sync();
        MPI_CHECK(MPI_Barrier(world.get()));
        const auto start = std::chrono::steady_clock::now();
        const CheckpointManifest got = store.load(path, state);
        double t = seconds_since(start);
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, world.get()));
        t_read.push_back(t);
        int64_t w = fill_or_check(cfg, layout, buffers, true);
        if (got.step != manifest.step) ++w;
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, &w, 1, MPI_INT64_T, MPI_SUM, world.get()));
        wrong += w;
      }
    }
    previous = path;
    if (root) {
      std::printf("#   repeat %d: write %.3f s, read %.3f s, dd %.3f s\n", rep + 1, t_write.back(),
                  t_read.back(), t_dd.back());
      std::fflush(stdout);
    }
  }
  if (root) {
    fs::remove_all(store_dir);
    fs::remove(dd_path);
  }

  if (root) {
    const double gb = static_cast<double>(file_bytes) / 1e9;
    auto best = [](const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); };
    const double w_med = gb / median(t_write), w_best = gb / best(t_write);
    const double r_med = gb / median(t_read), r_best = gb / best(t_read);
    const double d_med = gb / median(t_dd), d_best = gb / best(t_dd);
    const double ratio = w_med / d_med, ratio_best = w_best / d_best;
    std::printf("# checkpoint file %llu bytes (%.3f GiB; tensors %.3f GiB); GB/s = bytes / s / 1e9\n",
                static_cast<unsigned long long>(file_bytes), static_cast<double>(file_bytes) / kGiB,
                state_gib);
    std::printf("# %-28s %10s %10s\n", "", "median", "best");
    std::printf("  %-28s %10.3f %10.3f\n", "write (save, whole commit)", w_med, w_best);
    std::printf("  %-28s %10.3f %10.3f\n", "read (load + verify)", r_med, r_best);
    std::printf("  %-28s %10.3f %10.3f\n", "dd (write+fsync, rank 0)", d_med, d_best);
    std::printf("  %-28s %10.3f %10.3f   goal >= %.2f: %s\n", "write / dd", ratio, ratio_best,
                kGoal, ratio >= kGoal ? "PASS" : "MISS");
    std::printf("# reads come from the page cache (caches cannot be dropped here)\n");
    std::printf("# wrong elements after load: %lld%s\n", static_cast<long long>(wrong),
                wrong ? "  <-- ERROR" : "");
    std::printf(
        "RESULT ranks=%d dp=%d tp=%d pp=%d gib=%.3f file_bytes=%llu write_gbs=%.4f "
        "write_best_gbs=%.4f read_gbs=%.4f read_best_gbs=%.4f dd_gbs=%.4f dd_best_gbs=%.4f "
        "ratio=%.4f ratio_best=%.4f wrong=%lld\n",
        world.size(), shape.dp, shape.tp, shape.pp, static_cast<double>(file_bytes) / kGiB,
        static_cast<unsigned long long>(file_bytes), w_med, w_best, r_med, r_best, d_med, d_best,
        ratio, ratio_best, static_cast<long long>(wrong));
    std::fflush(stdout);
  }
  return wrong ? kExitFailure : 0;
}

}  // namespace

int main(int argc, char** argv) { return mpitrain::mpi_program("ckpt-bench", argc, argv, run); }
