// ranks: 2 4
// Parallel checkpoints: saved under one dp x tp x pp layout and loaded under every other (down to
// one rank), bit for bit; the commit protocol's directory states; damage found, named and
// skipped; saves in the background write the state of their step. The buffers hold known values
// of (version, buffer, tensor, element): no trainer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/build_id.hpp"
#include "mpitrain/train/checkpointer.hpp"
#include "mpitrain/train/gather.hpp"

namespace fs = std::filesystem;
using namespace mpitrain;

namespace {

const MpiComm& world() {
  static const MpiComm w = MpiComm::world();
  return w;
}

ModelConfig small_model(Arch arch) {
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = arch == Arch::Llama ? 2 : 4;
  c.d_model = 16;
  c.d_ff = 32;
  c.vocab_size = 20;
  c.max_seq_len = 8;
  return c;
}

// Every grid shape of at most world-size ranks that the model can be split into.
std::vector<GridShape> shapes_for(const ModelConfig& c, int world_size) {
  std::vector<GridShape> out;
  for (int size = 1; size <= world_size; ++size)
    for (int tp = 1; tp <= size; ++tp)
      for (int pp = 1; pp <= c.n_layer; ++pp)
        if (size % (tp * pp) == 0 && c.n_head % tp == 0 && c.n_kv_head % tp == 0 &&
            c.d_ff % tp == 0 && c.padded_vocab() % tp == 0)
          out.push_back(GridShape{size / (tp * pp), tp, pp});
  return out;
}

std::string name(const GridShape& s) {
  return "dp" + std::to_string(s.dp) + "tp" + std::to_string(s.tp) + "pp" + std::to_string(s.pp);
}

// The value of element i of tensor g in buffer b (0 params, then the optimizer's state: 1
// adam_m, 2 adam_v, or 1 momentum) of version v: a 24-bit integer times 2^-23, exact in float
// (and mostly not in bf16 or fp16).
float value(int v, int b, int g, uint64_t i) {
  uint64_t x = (static_cast<uint64_t>(v) << 56) ^ (static_cast<uint64_t>(b) << 48) ^
               (static_cast<uint64_t>(g) << 36) ^ i;
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) * 0x1p-23f;
}

// How a rank keeps its buffers (parallel/shard_ranges.hpp).
struct Setup {
  // 0: every dp rank holds and owns the whole buffer; 1: owns its range of it, cut at arbitrary
  // points, not at tensors (ZeRO-1); 2: owns its piece of every unit; 3: holds only those.
  int zero = 0;
  Precision precision = Precision::Fp32;  // bf16 / fp16: a separate fp32 master
  OptimizerKind kind = OptimizerKind::AdamW;
};

// A data-parallel rank's piece of every unit of the layout (ZeRO-2/3).
ShardRanges unit_pieces(const ParamLayout& layout, int dp, int dp_rank) {
  std::vector<FlatRange> pieces;
  for (const FlatRange& unit : layout.units()) {
    const FlatRange piece = zero_range(unit.size(), dp, dp_rank);
    pieces.push_back({unit.lo + piece.lo, unit.lo + piece.hi});
  }
  return ShardRanges(pieces);
}

// One rank's part of the model under a grid shape: the compute params it holds, and the
// optimizer's master and state for what it owns, each compact over its ranges.
struct Shard {
  const ModelConfig& config;
  ParamLayout layout;
  Setup setup;
  ShardRanges held, owned;
  bool writer = false;
  bool separate = false;              // the master is no view of params
  std::vector<float> params, master;  // params: held.size(); master: owned.size(), if separate
  std::vector<std::vector<float>> moments;  // the state buffers, owned.size() floats each

  Shard(const ModelConfig& c, const GridShape& shape, int rank, Setup s = {})
      : config(c),
        layout(c, shard_of(shape, pipeline_layer_split(c.n_layer, shape.pp, ""), rank % shape.tp,
                           rank / (shape.tp * shape.dp))),
        setup(s) {
    const int dp_rank = (rank / shape.tp) % shape.dp;
    const size_t n = layout.total();
    const ShardRanges pieces = unit_pieces(layout, shape.dp, dp_rank);
    held = s.zero == 3 ? pieces : ShardRanges::whole(n);
    const FlatRange range{n * dp_rank / shape.dp, n * (dp_rank + 1) / shape.dp};
    owned = s.zero == 1 ? ShardRanges({range}) : s.zero >= 2 ? pieces : held;
    writer = s.zero > 0 || dp_rank == 0;
    params.assign(held.size(), -7.0f);
    separate = s.precision != Precision::Fp32 || !master_view(params.data(), held, owned);
    if (separate) master.assign(owned.size(), -7.0f);
    moments.assign(state_names(s.kind).size(), std::vector<float>(owned.size(), -7.0f));
  }
  Shard(const ModelConfig& c, const MpiComm& comm, Setup s = {})
      : Shard(c, GridShape{comm.size(), 1, 1}, comm.rank(), s) {}

  CheckpointState state() {
    std::vector<float*> buffers;
    for (std::vector<float>& b : moments) buffers.push_back(b.data());
    float* values = separate ? master.data() : master_view(params.data(), held, owned);
    return {config,     layout,  params.data(),   held,  owned, values, separate,
            setup.kind, buffers, setup.precision, writer};
  }
  // Every buffer set to version v's values, through take_shard from full tensors; params
  // rounded to the precision (the master keeps the values), the rest only where owned.
  void fill(int v) {
    const ParamLayout full(config);
    for (const ParamTensor& t : layout.tensors()) {
      const ParamTensor& whole = full.tensors()[t.global_index];
      const ShardRanges::Overlap h = held.overlap(t.offset, t.offset + t.numel);
      const ShardRanges::Overlap o = owned.overlap(t.offset, t.offset + t.numel);
      std::vector<float> values(whole.numel), local(t.numel);
      for (size_t b = 0; b <= moments.size(); ++b) {
        for (uint64_t i = 0; i < whole.numel; ++i) values[i] = value(v, b, t.global_index, i);
        take_shard(t, values.data(), local.data());
        for (size_t f = h.begin; b == 0 && f < h.end; ++f)
          params[h.at + (f - h.begin)] = round_to(local[f - t.offset], setup.precision);
        float* range = b > 0 ? moments[b - 1].data() : separate ? master.data() : nullptr;
        for (size_t f = o.begin; range && f < o.end; ++f)
          range[o.at + (f - o.begin)] = local[f - t.offset];
      }
    }
  }
  // Do the buffers hold version v, bit for bit?
  bool holds(int v) const {
    Shard expected(*this);
    expected.fill(v);
    auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
      return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    };
    bool ok = same(params, expected.params) && same(master, expected.master);
    for (size_t b = 0; b < moments.size(); ++b) ok = ok && same(moments[b], expected.moments[b]);
    return ok;
  }
};

CheckpointManifest manifest_of(int v, const ModelConfig& c, const GridShape& shape,
                               OptimizerKind kind = OptimizerKind::AdamW) {
  CheckpointManifest m;
  m.step = v;
  m.consumed_samples = 1000 + v;
  m.seed = 0xfedcba9876543210ull + v;  // beyond int64
  m.optimizer = kind;
  m.adam_steps = v - v / 3;  // within the ranges read_manifest checks
  m.loss_scale = v % 2 ? 65536.0 : 1.0;
  m.loss_scale_clean_steps = v / 2;
  m.skipped_steps = v / 3;
  m.val_loss = v % 2 ? 2.5 + v : std::nan("");
  m.model = c;
  m.layout = shape;
  m.pp_layers = shape.pp > 1 ? "1,1" : "";
  m.global_batch_size = 8;
  m.micro_batch_size = 2;
  m.seq_len = 8;
  return m;
}

// The loaded manifest is the saved one, plus what save sets.
void expect_manifest(const CheckpointManifest& got, const CheckpointManifest& want) {
  auto fields = [](const CheckpointManifest& m) {
    auto f = manifest_fields(m);
    std::erase_if(f,
                  [](const auto& kv) { return kv.first == "build_id" || kv.first == "wall_time"; });
    return f;
  };
  EXPECT_EQ(fields(got), fields(want));
  EXPECT_EQ(got.build_id, build_id());
  EXPECT_EQ(got.wall_time.size(), 20u) << got.wall_time;  // 2024-05-01T12:00:00Z
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh directory shared by all ranks, removed afterwards.
class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string path;
    if (world().rank() == 0) {
      std::string tmpl = (fs::temp_directory_path() / "mpitrain-ckpt-XXXXXX").string();
      ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
      path = tmpl;
    }
    int size = static_cast<int>(path.size());
    MPI_Bcast(&size, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path.resize(size);
    MPI_Bcast(path.data(), size, MPI_CHAR, 0, MPI_COMM_WORLD);
    dir_ = path;
  }
  void TearDown() override {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world().rank() == 0) fs::remove_all(dir_);
  }
  // Runs fn on rank 0 (file surgery, serial reads), then a barrier.
  template <class F>
  void on_root(F&& fn) {
    if (world().rank() == 0) fn();
    MPI_Barrier(MPI_COMM_WORLD);
  }
  // The message of the UsageError that store.load(path) throws, "" if none.
  static std::string load_error(CheckpointStore& store, const std::string& path, Shard& shard) {
    try {
      store.load(path, shard.state());
    } catch (const UsageError& e) {
      return e.what();
    }
    return "";
  }
  // Versions 1..n saved in checkpoints/ by the whole world (tp 2 where it fits).
  std::string save_versions(const ModelConfig& c, int n, int keep_last = 0) {
    const std::string ckpts = (dir_ / "checkpoints").string();
    const GridShape shape{world().size() / 2, 2, 1};
    CheckpointStore store(ckpts, world(), keep_last);
    Shard shard(c, shape, world().rank());
    for (int v = 1; v <= n; ++v) {
      shard.fill(v);
      store.save(manifest_of(v, c, shape), shard.state());
    }
    return ckpts;
  }

  fs::path dir_;
};

// Flips one byte of dataset `dset`'s data in a checkpoint file.
void flip_byte(const std::string& file, const std::string& dset) {
  haddr_t offset;
  {
    H5Handle f = open_file(file);
    H5Handle d = open_dataset(f.get(), dset);
    offset = H5Dget_offset(d.get());
    ASSERT_NE(offset, HADDR_UNDEF);
  }
  const int fd = ::open(file.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  unsigned char byte = 0;
  ASSERT_EQ(::pread(fd, &byte, 1, static_cast<off_t>(offset) + 5), 1);
  byte ^= 0x10;
  ASSERT_EQ(::pwrite(fd, &byte, 1, static_cast<off_t>(offset) + 5), 1);
  ::close(fd);
}

}  // namespace

// Every layout saves; every layout loads every save; the checksums do not depend on the layout.
TEST_F(CheckpointTest, EveryLayoutLoadsWhatEveryLayoutSaved) {
  for (Arch arch : {Arch::Gpt2, Arch::Llama}) {
    const ModelConfig c = small_model(arch);
    const std::vector<GridShape> shapes = shapes_for(c, world().size());
    auto dir_of = [&](size_t w) { return (dir_ / to_string(arch) / name(shapes[w])).string(); };
    for (size_t w = 0; w < shapes.size(); ++w) {
      const std::optional<MpiComm> comm =
          world().split_optional(world().rank() < shapes[w].size() ? 0 : -1, world().rank());
      if (comm) {
        Shard shard(c, shapes[w], comm->rank());
        shard.fill(static_cast<int>(w) + 1);
        CheckpointStore(dir_of(w), *comm)
            .save(manifest_of(static_cast<int>(w) + 1, c, shapes[w]), shard.state());
      }
      MPI_Barrier(MPI_COMM_WORLD);
    }
    on_root([&] {  // the serial recomputation agrees with the parallel sums
      for (size_t w = 0; w < shapes.size(); ++w) {
        std::ostringstream out;
        EXPECT_EQ(inspect_checkpoint(dir_of(w), true, out, std::cerr), 0) << out.str();
      }
    });
    for (size_t w = 0; w < shapes.size(); ++w)
      for (size_t r = 0; r < shapes.size(); ++r) {
        const std::optional<MpiComm> comm =
            world().split_optional(world().rank() < shapes[r].size() ? 0 : -1, world().rank());
        if (comm) {
          Shard shard(c, shapes[r], comm->rank());
          CheckpointStore store(dir_of(w), *comm);
          const std::optional<CheckpointManifest> m = store.load_latest(shard.state());
          ASSERT_TRUE(m.has_value());
          EXPECT_TRUE(shard.holds(static_cast<int>(w) + 1))
              << to_string(arch) << ": saved " << name(shapes[w]) << ", loaded " << name(shapes[r]);
          expect_manifest(*m, manifest_of(static_cast<int>(w) + 1, c, shapes[w]));
        }
        MPI_Barrier(MPI_COMM_WORLD);
      }
  }
}

// The same values give the same checksums whatever layout wrote them.
TEST_F(CheckpointTest, ChecksumsDoNotDependOnTheLayout) {
  const ModelConfig c = small_model(Arch::Llama);
  const std::vector<GridShape> shapes = shapes_for(c, world().size());
  for (size_t w = 0; w < shapes.size(); ++w) {
    const std::optional<MpiComm> comm =
        world().split_optional(world().rank() < shapes[w].size() ? 0 : -1, world().rank());
    if (comm) {
      Shard shard(c, shapes[w], comm->rank());
      shard.fill(1);
      CheckpointStore((dir_ / name(shapes[w])).string(), *comm)
          .save(manifest_of(1, c, shapes[w]), shard.state());
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  on_root([&] {
    auto sums = [&](const GridShape& s) {
      H5Handle f = open_file((dir_ / name(s) / step_dir_name(1) / kCheckpointFile).string());
      std::vector<uint64_t> out;
      const ParamLayout full(c);
      for (const std::string& g : checkpoint_groups(OptimizerKind::AdamW))
        for (const ParamTensor& t : full.tensors()) {
          H5Handle d = open_dataset(f.get(), dataset_path(g, t.name));
          out.push_back(read_attribute_uint64(d.get(), kChecksumAttribute));
        }
      return out;
    };
    const std::vector<uint64_t> first = sums(shapes[0]);
    for (const GridShape& s : shapes) EXPECT_EQ(sums(s), first) << name(s);
  });
}

TEST_F(CheckpointTest, LatestPointsToTheNewestAndKeepLastPrunes) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const std::string ckpts = save_versions(c, 3, 2);
  on_root([&] {
    EXPECT_EQ(read_text(fs::path(ckpts) / "latest"), step_dir_name(3) + "\n");
    EXPECT_FALSE(fs::exists(fs::path(ckpts) / step_dir_name(1)));
    EXPECT_TRUE(fs::exists(fs::path(ckpts) / step_dir_name(2) / kCheckpointFile));
    EXPECT_TRUE(fs::exists(fs::path(ckpts) / step_dir_name(3) / kCheckpointFile));
    EXPECT_FALSE(fs::exists(fs::path(ckpts) / (step_dir_name(3) + ".tmp")));
  });
  Shard shard(c, world());
  CheckpointStore store(ckpts, world());
  ASSERT_EQ(store.load_latest(shard.state())->step, 3);
  EXPECT_TRUE(shard.holds(3));
  // keep_last 0 keeps every one.
  const std::string all = (dir_ / "all").string();
  CheckpointStore keep_all(all, world(), 0);
  for (int v = 1; v <= 3; ++v)
    keep_all.save(manifest_of(v, c, {world().size(), 1, 1}), shard.state());
  on_root([&] {
    for (int v = 1; v <= 3; ++v) EXPECT_TRUE(fs::exists(fs::path(all) / step_dir_name(v)));
  });
}

// The store's directory removed after a save (or its file system unmounted): the next save fails
// on every rank alike (AgreedError naming the cause and the directory) and does not make it again
// where no one looks; the store's earlier save is named as the newest.
TEST_F(CheckpointTest, DirectoryGoneAfterASaveIsAnAgreedFailure) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const GridShape shape{world().size(), 1, 1};
  Shard shard(c, world());
  const fs::path ckpts = dir_ / "checkpoints";
  CheckpointStore store(ckpts.string(), world());
  store.save(manifest_of(1, c, shape), shard.state());
  on_root([&] { fs::rename(ckpts, dir_ / "kept"); });
  std::string message;
  try {
    store.save(manifest_of(2, c, shape), shard.state());
  } catch (const AgreedError& e) {
    message = e.what();
  }
  EXPECT_EQ(message, "checkpoint " + step_dir_name(2) + ": No such file or directory writing " +
                         ckpts.string() + " (it held this run's " + step_dir_name(1) +
                         ": removed, or its file system unmounted); the newest checkpoint is " +
                         step_dir_name(1));
  on_root([&] { EXPECT_FALSE(fs::exists(ckpts)); });
}

TEST_F(CheckpointTest, FlippedByteIsNamedAndLoadLatestFallsBack) {
  const ModelConfig c = small_model(Arch::Llama);
  const std::string ckpts = save_versions(c, 2);
  const std::string step2 = (fs::path(ckpts) / step_dir_name(2)).string();
  const std::string file2 = (fs::path(step2) / kCheckpointFile).string();
  on_root([&] { flip_byte(file2, "/adam_v/h.1.attn.qkv.weight"); });

  Shard shard(c, world());
  CheckpointStore store(ckpts, world());
  const std::string err = load_error(store, step2, shard);  // every rank throws the same
  EXPECT_NE(err.find(file2), std::string::npos) << err;
  EXPECT_NE(err.find("dataset /adam_v/h.1.attn.qkv.weight: checksum mismatch"), std::string::npos)
      << err;

  if (world().rank() == 0) ::testing::internal::CaptureStderr();
  const std::optional<CheckpointManifest> m = store.load_latest(shard.state());
  if (world().rank() == 0) {
    const std::string report = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(report.find(file2), std::string::npos) << report;
    EXPECT_NE(report.find("/adam_v/h.1.attn.qkv.weight"), std::string::npos) << report;
    EXPECT_NE(report.find("trying an older one"), std::string::npos) << report;
  }
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 1);
  EXPECT_TRUE(shard.holds(1));

  on_root([&] {  // ckpt-inspect --verify agrees
    std::ostringstream out, err_out;
    EXPECT_EQ(inspect_checkpoint(ckpts, true, out, err_out), 1);  // latest = step 2
    EXPECT_NE(out.str().find("MISMATCH"), std::string::npos) << out.str();
    std::string line;
    for (std::istringstream rows(out.str()); std::getline(rows, line);)
      EXPECT_EQ(line.find("MISMATCH") != std::string::npos,
                line.starts_with("/adam_v/h.1.attn.qkv.weight "))
          << line;
    std::ostringstream ok;
    EXPECT_EQ(inspect_checkpoint((fs::path(ckpts) / step_dir_name(1)).string(), true, ok, err_out),
              0);
    EXPECT_NE(ok.str().find("verify: all checksums OK"), std::string::npos) << ok.str();
    EXPECT_NE(ok.str().find("consumed_samples       1001"), std::string::npos) << ok.str();
  });
}

TEST_F(CheckpointTest, TruncatedFileIsNamedAndLoadLatestFallsBack) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const std::string ckpts = save_versions(c, 2);
  const std::string step2 = (fs::path(ckpts) / step_dir_name(2)).string();
  const std::string file2 = (fs::path(step2) / kCheckpointFile).string();
  on_root([&] { fs::resize_file(file2, fs::file_size(file2) / 2); });
  Shard shard(c, world());
  CheckpointStore store(ckpts, world());
  const std::string err = load_error(store, step2, shard);
  EXPECT_NE(err.find("cannot resume from " + step2 + ": " + file2 + ": "), std::string::npos)
      << err;
  EXPECT_NE(err.find("truncated file"), std::string::npos) << err;  // HDF5's own words
  const std::optional<CheckpointManifest> m = store.load_latest(shard.state());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 1);
  EXPECT_TRUE(shard.holds(1));
  on_root([&] {
    std::ostringstream out, err_out;
    EXPECT_EQ(inspect_checkpoint(step2, true, out, err_out), 2);
    EXPECT_EQ(inspect_checkpoint((dir_ / "nowhere").string(), false, out, err_out), 2);
    EXPECT_NE(err_out.str().find("no readable checkpoint at"), std::string::npos) << err_out.str();
  });
}

TEST_F(CheckpointTest, MissingDatasetAndWrongManifestAreNamed) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const std::string ckpts = save_versions(c, 3);
  auto dir = [&](int v) { return (fs::path(ckpts) / step_dir_name(v)).string(); };
  auto file = [&](int v) { return (fs::path(dir(v)) / kCheckpointFile).string(); };
  on_root([&] {
    H5Handle f3 = open_file(file(3), H5F_ACC_RDWR);
    H5_CHECK(H5Ldelete(f3.get(), "/params/lnf.weight", H5P_DEFAULT));
    H5Handle f2 = open_file(file(2), H5F_ACC_RDWR);  // a manifest of step 7, checksum and all
    H5_CHECK(H5Ldelete(f2.get(), kManifestGroup, H5P_DEFAULT));
    CheckpointManifest m7 = manifest_of(2, c, {world().size() / 2, 2, 1});
    m7.step = 7;
    write_manifest(f2.get(), m7, true);
  });
  Shard shard(c, world());
  CheckpointStore store(ckpts, world());
  std::string err = load_error(store, dir(3), shard);
  EXPECT_NE(err.find(file(3) + ": dataset /params/lnf.weight is missing"), std::string::npos)
      << err;
  err = load_error(store, dir(2), shard);
  EXPECT_NE(err.find(file(2) + ": manifest step 7 but the directory is " + step_dir_name(2)),
            std::string::npos)
      << err;
  const std::optional<CheckpointManifest> m = store.load_latest(shard.state());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 1);
  EXPECT_TRUE(shard.holds(1));
}

TEST_F(CheckpointTest, TmpDirsAreIgnoredAndCleanedUp) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const std::string ckpts = save_versions(c, 1);
  const fs::path stale = fs::path(ckpts) / (step_dir_name(9) + ".tmp");
  on_root([&] {  // a save of step 9 cut short: newer, but never committed
    fs::create_directory(stale);
    std::ofstream(stale / kCheckpointFile) << "half a file";
  });
  Shard shard(c, world());
  CheckpointStore store(ckpts, world());
  const std::optional<CheckpointManifest> m = store.load_latest(shard.state());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->step, 1);
  shard.fill(2);
  store.save(manifest_of(2, c, {world().size(), 1, 1}), shard.state());
  on_root([&] { EXPECT_FALSE(fs::exists(stale)); });
}

TEST_F(CheckpointTest, LatestNamingAMissingDirFallsBackToTheScan) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const std::string ckpts = save_versions(c, 2);
  on_root([&] { fs::remove_all(fs::path(ckpts) / step_dir_name(2)); });
  Shard shard(c, world());
  CheckpointStore store(ckpts, world());
  EXPECT_EQ(store.load_latest(shard.state())->step, 1);
  EXPECT_TRUE(shard.holds(1));
  on_root([&] { fs::remove_all(ckpts); });
  EXPECT_FALSE(store.load_latest(shard.state()).has_value());
}

TEST_F(CheckpointTest, SaveAsReplacesBestAndACutShortReplaceLeavesOld) {
  const ModelConfig c = small_model(Arch::Llama);
  const GridShape shape{world().size(), 1, 1};
  const std::string ckpts = (dir_ / "checkpoints").string();
  const std::string best = (fs::path(ckpts) / "best").string();
  CheckpointStore store(ckpts, world());
  Shard shard(c, world());
  for (int v = 1; v <= 2; ++v) {
    shard.fill(v);
    store.save_as("best", manifest_of(v, c, shape), shard.state());
  }
  on_root([&] {
    EXPECT_FALSE(fs::exists(best + ".old"));
    EXPECT_FALSE(fs::exists(best + ".tmp"));
    EXPECT_FALSE(fs::exists(fs::path(ckpts) / "latest"));
    fs::rename(best, best + ".old");  // a crash between the two renames
  });
  shard.fill(0);
  EXPECT_EQ(store.load(best, shard.state()).step, 2);
  EXPECT_TRUE(shard.holds(2));
  shard.fill(3);
  store.save_as("best", manifest_of(3, c, shape), shard.state());
  on_root([&] { EXPECT_FALSE(fs::exists(best + ".old")); });
  EXPECT_EQ(store.load(best, shard.state()).step, 3);
  EXPECT_TRUE(shard.holds(3));
  EXPECT_THROW(store.save_as("latest", manifest_of(3, c, shape), shard.state()), UsageError);
  EXPECT_NE(load_error(store, (dir_ / "nothing").string(), shard).find("does not exist"),
            std::string::npos);
}

TEST_F(CheckpointTest, AnotherModelIsAUsageError) {
  const std::string ckpts = save_versions(small_model(Arch::Gpt2), 1);
  ModelConfig other = small_model(Arch::Gpt2);
  other.n_layer = 4;
  Shard shard(other, world());
  CheckpointStore store(ckpts, world());
  try {
    store.load_latest(shard.state());
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "holds another model than this run's (checkpoint vs run: n_layer 2 vs 4)"),
              std::string::npos)
        << e.what();
  }
}

// ---- optimizer ranges (ZeRO-1), master weights, optimizer kinds, format version 1 -----------

namespace {

struct RunConfig {
  GridShape shape;
  int zero;  // Setup::zero
};

std::string name(const RunConfig& r) {
  return name(r.shape) + (r.zero ? "zero" + std::to_string(r.zero) : "");
}

// Every shape of at most the world's size, without ZeRO and (where dp > 1) at each ZeRO level.
std::vector<RunConfig> run_configs(const ModelConfig& c) {
  std::vector<RunConfig> out;
  for (const GridShape& s : shapes_for(c, world().size())) {
    out.push_back({s, 0});
    for (int zero = 1; zero <= 3 && s.dp > 1; ++zero) out.push_back({s, zero});
  }
  return out;
}

// Runs fn(comm) on the first `size` ranks of the world, then a barrier.
template <class F>
void on_ranks(int size, F&& fn) {
  const std::optional<MpiComm> comm =
      world().split_optional(world().rank() < size ? 0 : -1, world().rank());
  if (comm) fn(*comm);
  MPI_Barrier(MPI_COMM_WORLD);
}

// The checksum attributes of every dataset of a checkpoint of `kind` (serial read).
std::vector<uint64_t> stored_checksums(const std::string& dir, const ModelConfig& c,
                                       OptimizerKind kind) {
  H5Handle f = open_file((fs::path(dir) / kCheckpointFile).string());
  std::vector<uint64_t> out;
  const ParamLayout full(c);
  for (const std::string& g : checkpoint_groups(kind))
    for (const ParamTensor& t : full.tensors()) {
      H5Handle d = open_dataset(f.get(), dataset_path(g, t.name));
      out.push_back(read_attribute_uint64(d.get(), kChecksumAttribute));
    }
  return out;
}

}  // namespace

// Saved with ZeRO-1 ranges at every dp (each dp rank writes its range's part of every tensor) and
// loaded under every layout at every ZeRO level (ZeRO-3: into unit pieces): the same values bit
// for bit, and the same checksums as a single rank's save. At 4 ranks this includes dp 2 with
// ZeRO -> dp 1 without and -> dp 4 with ZeRO; with pp 2 the tied wte's second copy is loaded too.
TEST_F(CheckpointTest, ZeroRangesSaveAndLoadUnderEveryLayout) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const std::vector<RunConfig> configs = run_configs(c);
  std::vector<RunConfig> savers = {configs[0]};  // one rank: the reference
  for (const RunConfig& r : configs)
    if (r.zero == 1) savers.push_back(r);
  ASSERT_GE(savers.size(), 2u);
  auto dir_of = [&](size_t w) { return (dir_ / "zero" / name(savers[w])).string(); };
  for (size_t w = 0; w < savers.size(); ++w)
    on_ranks(savers[w].shape.size(), [&](const MpiComm& comm) {
      Shard shard(c, savers[w].shape, comm.rank(), {savers[w].zero});
      shard.fill(static_cast<int>(w) + 1);
      CheckpointStore(dir_of(w), comm).save(manifest_of(1, c, savers[w].shape), shard.state());
    });
  on_root([&] {  // the checksums written from ranges are those of the whole tensors
    for (size_t w = 0; w < savers.size(); ++w) {
      std::ostringstream out;
      EXPECT_EQ(inspect_checkpoint(dir_of(w), true, out, std::cerr), 0) << out.str();
    }
  });
  for (size_t w = 0; w < savers.size(); ++w)
    for (const RunConfig& r : configs)
      on_ranks(r.shape.size(), [&](const MpiComm& comm) {
        Shard shard(c, r.shape, comm.rank(), {r.zero});
        const std::optional<CheckpointManifest> m =
            CheckpointStore(dir_of(w), comm).load_latest(shard.state());
        ASSERT_TRUE(m.has_value());
        EXPECT_TRUE(shard.holds(static_cast<int>(w) + 1))
            << "saved " << name(savers[w]) << ", loaded " << name(r);
        expect_manifest(*m, manifest_of(1, c, savers[w].shape));
      });
  // The same values saved by one rank and with ZeRO ranges: the same checksums.
  on_ranks(savers[1].shape.size(), [&](const MpiComm& comm) {
    Shard shard(c, savers[1].shape, comm.rank(), {1});
    shard.fill(1);
    CheckpointStore((dir_ / "zero-v1").string(), comm)
        .save(manifest_of(1, c, savers[1].shape), shard.state());
  });
  on_root([&] {
    EXPECT_EQ(
        stored_checksums((dir_ / "zero-v1" / step_dir_name(1)).string(), c, OptimizerKind::AdamW),
        stored_checksums((fs::path(dir_of(0)) / step_dir_name(1)).string(), c,
                         OptimizerKind::AdamW));
  });
}

// Saved from ZeRO-3 unit pieces (each dp rank holds and owns its piece of every unit) at every
// layout with dp > 1, and from bf16 pieces (a separate master), all with the same values: the
// checksums of a single rank's save, and loaded whole (ZeRO-0) and into the pieces of other
// layouts, the same values bit for bit. At 4 ranks this includes dp 2 tp 2 and dp 2 pp 2
// (gpt2: the tied wte's pieces on the last stage), and dp 4 -> dp 3 pieces.
TEST_F(CheckpointTest, Zero3PiecesSaveAndLoadAcrossLayouts) {
  for (Arch arch : {Arch::Gpt2, Arch::Llama}) {
    const ModelConfig c = small_model(arch);
    const std::vector<RunConfig> configs = run_configs(c);
    std::vector<std::pair<RunConfig, Precision>> savers = {{configs[0], Precision::Fp32}};
    for (const RunConfig& r : configs)
      if (r.zero == 3) savers.push_back({r, Precision::Fp32});
    ASSERT_GE(savers.size(), 2u);
    savers.push_back({savers.back().first, Precision::Bf16});
    auto dir_of = [&](size_t w) {
      return (dir_ / "zero3" / to_string(arch) / name(savers[w].first) /
              to_string(savers[w].second))
          .string();
    };
    for (size_t w = 0; w < savers.size(); ++w)
      on_ranks(savers[w].first.shape.size(), [&](const MpiComm& comm) {
        const RunConfig& r = savers[w].first;
        Shard shard(c, r.shape, comm.rank(), {r.zero, savers[w].second});
        if (r.zero == 3) {
          EXPECT_LT(shard.held.size(), shard.layout.total());  // pieces only
        }
        shard.fill(1);
        CheckpointStore(dir_of(w), comm).save(manifest_of(1, c, r.shape), shard.state());
      });
    on_root([&] {
      for (size_t w = 0; w < savers.size(); ++w) {
        std::ostringstream out;
        EXPECT_EQ(inspect_checkpoint(dir_of(w), true, out, std::cerr), 0) << out.str();
        const auto sums = [&](size_t k) {
          return stored_checksums((fs::path(dir_of(k)) / step_dir_name(1)).string(), c,
                                  OptimizerKind::AdamW);
        };
        EXPECT_EQ(sums(w), sums(0)) << name(savers[w].first) << to_string(savers[w].second);
      }
    });
    // Each save loads into one rank's whole buffer and every ZeRO-3 layout in fp32; the bf16
    // one also at every ZeRO-0 layout, and in bf16 (ZeRO-1/2 loads: the test above).
    for (size_t w = 0; w < savers.size(); ++w) {
      const bool bf16 = savers[w].second == Precision::Bf16;
      for (const RunConfig& r : configs) {
        if (r.zero != 3 && !(r.zero == 0 && (bf16 || r.shape.size() == 1))) continue;
        for (Precision p : {Precision::Fp32, Precision::Bf16}) {
          if (p == Precision::Bf16 && !bf16) continue;
          on_ranks(r.shape.size(), [&](const MpiComm& comm) {
            Shard shard(c, r.shape, comm.rank(), {r.zero, p});
            ASSERT_TRUE(CheckpointStore(dir_of(w), comm).load_latest(shard.state()).has_value());
            EXPECT_TRUE(shard.holds(1))
                << to_string(arch) << ": saved " << name(savers[w].first) << " "
                << to_string(savers[w].second) << ", loaded " << name(r) << " " << to_string(p);
          });
        }
      }
    }
  }
}

// A state whose optimizer owns elements that its params do not hold is refused before any
// transfer, on save and on load, naming the first such tensor.
TEST_F(CheckpointTest, OwningWhatParamsDoNotHoldIsRefused) {
  const ModelConfig c = small_model(Arch::Llama);
  const std::string ckpts = save_versions(c, 1);
  Shard shard(c, world(), {3});
  shard.owned = ShardRanges::whole(shard.layout.total());
  shard.moments.assign(shard.moments.size(), std::vector<float>(shard.owned.size()));
  shard.master.assign(shard.owned.size(), 0.0f);
  shard.separate = true;
  const std::string want = "tensor wte: the optimizer owns elements that params does not hold";
  CheckpointStore store(ckpts, world());
  const std::string err = load_error(store, (fs::path(ckpts) / step_dir_name(1)).string(), shard);
  EXPECT_NE(err.find(want), std::string::npos) << err;
  try {
    store.save(manifest_of(2, c, {world().size(), 1, 1}), shard.state());
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}

// bf16 / fp16 runs save the fp32 master as /params; loading gives an fp32 run those values and
// a low-precision run its master back with the params rounded.
TEST_F(CheckpointTest, MasterWeightsAreSavedInFp32AndParamsRoundedOnLoad) {
  const ModelConfig c = small_model(Arch::Llama);
  const GridShape dp_all{world().size(), 1, 1};
  const std::string bf16_dir = (dir_ / "bf16").string(), fp32_dir = (dir_ / "fp32").string();
  Shard bf16(c, world(), {1, Precision::Bf16});
  bf16.fill(5);
  ASSERT_NE(std::memcmp(bf16.params.data() + bf16.owned.ranges()[0].lo, bf16.master.data(),
                        bf16.master.size() * 4),
            0);  // the values are not all bf16 numbers
  CheckpointStore(bf16_dir, world()).save(manifest_of(5, c, dp_all), bf16.state());
  Shard fp32(c, world());
  fp32.fill(5);
  CheckpointStore(fp32_dir, world()).save(manifest_of(5, c, dp_all), fp32.state());
  on_root([&] {
    EXPECT_EQ(
        stored_checksums((fs::path(bf16_dir) / step_dir_name(5)).string(), c, OptimizerKind::AdamW),
        stored_checksums((fs::path(fp32_dir) / step_dir_name(5)).string(), c,
                         OptimizerKind::AdamW));
  });
  for (const RunConfig& r : run_configs(c))
    for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16})
      on_ranks(r.shape.size(), [&](const MpiComm& comm) {
        Shard shard(c, r.shape, comm.rank(), {r.zero, p});
        ASSERT_TRUE(CheckpointStore(bf16_dir, comm).load_latest(shard.state()).has_value());
        EXPECT_TRUE(shard.holds(5)) << name(r) << " " << to_string(p);
      });
}

// SGD's one state buffer round-trips under ranges; a checkpoint of one optimizer does not load
// into a run of another, with a message naming both.
TEST_F(CheckpointTest, OptimizerKindsHaveTheirStateAndDoNotMix) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const GridShape dp_all{world().size(), 1, 1};
  const std::string sgd_dir = (dir_ / "sgd").string();
  Shard sgd(c, world(), {1, Precision::Fp32, OptimizerKind::Sgd});
  sgd.fill(2);
  CheckpointStore(sgd_dir, world()).save(manifest_of(2, c, dp_all), sgd.state());
  on_ranks(1, [&](const MpiComm& comm) {
    Shard one(c, comm, {0, Precision::Fp32, OptimizerKind::Sgd});
    const std::optional<CheckpointManifest> m =
        CheckpointStore(sgd_dir, comm).load_latest(one.state());
    ASSERT_TRUE(m.has_value());
    EXPECT_TRUE(one.holds(2));
    expect_manifest(*m, manifest_of(2, c, dp_all, OptimizerKind::Sgd));
  });
  on_root([&] {
    std::ostringstream out;
    EXPECT_EQ(inspect_checkpoint(sgd_dir, true, out, std::cerr), 0) << out.str();
    EXPECT_NE(out.str().find("/momentum/h.1.mlp.fc.weight "), std::string::npos) << out.str();
    EXPECT_EQ(out.str().find("/adam_m/"), std::string::npos) << out.str();
    EXPECT_NE(out.str().find("optimizer              sgd"), std::string::npos) << out.str();
  });
  const std::string adamw_dir = save_versions(c, 1);
  const std::pair<std::string, OptimizerKind> mixes[] = {{sgd_dir, OptimizerKind::AdamW},
                                                         {adamw_dir, OptimizerKind::Sgd},
                                                         {adamw_dir, OptimizerKind::Lamb}};
  for (const auto& [dir, kind] : mixes) {
    Shard shard(c, world(), {0, Precision::Fp32, kind});
    CheckpointStore store(dir, world());
    const std::string saved = dir == sgd_dir ? "sgd" : "adamw";
    const std::string want = "holds the state of optimizer " + saved + ", this run uses " +
                             to_string(kind) + " (set optimizer to " + saved;
    try {
      store.load_latest(shard.state());
      ADD_FAILURE() << "no UsageError";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// Format version 1 (no optimizer kind, no loss-scaler counters) loads as AdamW with a clean
// scaler; a newer version is refused by name.
TEST_F(CheckpointTest, Version1LoadsAsAdamWAndNewerVersionsAreRefused) {
  const ModelConfig c = small_model(Arch::Llama);
  const std::string ckpts = save_versions(c, 2);
  auto file = [&](int v) {
    return (fs::path(ckpts) / step_dir_name(v) / kCheckpointFile).string();
  };
  on_root([&] {
    for (int v : {1, 2}) {
      H5Handle f = open_file(file(v), H5F_ACC_RDWR);
      H5Handle manifest(H5_CHECK(H5Gopen2(f.get(), kManifestGroup, H5P_DEFAULT)));
      write_attribute_int(manifest.get(), "format_version", v == 1 ? 1 : 4);
      if (v == 2) continue;
      for (const char* added : {"optimizer", "loss_scale_clean_steps", "skipped_steps", "checksum"})
        H5_CHECK(H5Adelete(manifest.get(), added));
    }
  });
  Shard shard(c, world());
  CheckpointStore store(ckpts, world());
  const std::string err = load_error(store, (fs::path(ckpts) / step_dir_name(2)).string(), shard);
  EXPECT_NE(err.find("manifest format_version 4, this build reads 1 to 3"), std::string::npos)
      << err;
  const CheckpointManifest m =
      store.load((fs::path(ckpts) / step_dir_name(1)).string(), shard.state());
  EXPECT_TRUE(shard.holds(1));
  EXPECT_EQ(m.format_version, 1);
  EXPECT_EQ(m.optimizer, OptimizerKind::AdamW);
  EXPECT_EQ(m.loss_scale_clean_steps, 0);
  EXPECT_EQ(m.skipped_steps, 0);
  EXPECT_EQ(m.consumed_samples, 1001u);
  on_root([&] {
    std::ostringstream out;
    EXPECT_EQ(
        inspect_checkpoint((fs::path(ckpts) / step_dir_name(1)).string(), true, out, std::cerr), 0)
        << out.str();
  });
}

// ---- saves in the background (train/checkpointer.hpp over ckpt/async_saver.hpp) --------------

// dir/name, dir created first by rank 0.
std::string in_made_dir(const fs::path& dir, const std::string& name) {
  if (world().rank() == 0) fs::create_directories(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return (dir / name).string();
}

// A Checkpointer over a shard's state, with its metrics file in dir; mirrored: through host
// copies, as on a device (the CPU backend's memory stands in).
struct Saves {
  CpuBackend<float> backend{1};
  MpiComm node = world().split_shared();
  TraceRecorder trace;  // off
  MetricsLog log;
  CheckpointStore store;
  CheckpointState live;
  Checkpointer saves;
  Saves(const fs::path& dir, Shard& shard, bool async, bool mirrored = false)
      : log(in_made_dir(dir, "metrics.jsonl"), world().rank() == 0),
        store((dir / "checkpoints").string(), world()),
        live(shard.state()),
        saves(plan_saves({async, async, mirrored}, live, node, world()), store, live, backend, log,
              trace) {}
};

// The file holds the state of the step the save was taken at, not what training did after: the
// buffers change right after save() returns, while the writer cannot yet touch HDF5 (this
// thread holds its lock), so the file is written after the change. Also through a device's host
// copies (only the writers hold any: ZeRO-0's other ranks none).
TEST_F(CheckpointTest, BackgroundSaveWritesTheStateOfItsStep) {
  const ModelConfig c = small_model(Arch::Gpt2);
  for (const bool mirrored : {false, true}) {
    for (const ::Setup setup : {::Setup{}, ::Setup{1}, ::Setup{3, Precision::Bf16}}) {
      if (mirrored && setup.zero == 1) continue;  // ZeRO-0 and 3 show it: the test's time
      SCOPED_TRACE("zero " + std::to_string(setup.zero) + (mirrored ? ", mirrored" : ""));
      const GridShape shape{world().size(), 1, 1};
      Shard shard(c, shape, world().rank(), setup);
      shard.fill(1);
      const fs::path dir =
          dir_ / ("zero" + std::to_string(setup.zero) + (mirrored ? "-mirrored" : ""));
      Saves s(dir, shard, true, mirrored);
      ASSERT_TRUE(s.saves.async());
      {
        const std::unique_lock<std::mutex> hdf5 = lock_hdf5();
        s.saves.save(manifest_of(1, c, shape));
        shard.fill(2);  // the next step's update
      }
      s.saves.wait();
      Shard loaded(c, shape, world().rank(), setup);
      const std::string saved = (dir / "checkpoints" / step_dir_name(1)).string();
      expect_manifest(s.store.load(saved, loaded.state()), manifest_of(1, c, shape));
      EXPECT_TRUE(loaded.holds(1));
      EXPECT_TRUE(shard.holds(2));  // training's buffers were left alone
    }
  }
}

// Background and synchronous saves write the same bytes of tensor data; two saves in a row
// (the second waits for the first) both commit, and `latest` names the second.
TEST_F(CheckpointTest, BackgroundSavesEqualSynchronousOnes) {
  const ModelConfig c = small_model(Arch::Llama);
  const GridShape shape{world().size(), 1, 1};
  Shard shard(c, shape, world().rank(), ::Setup{1});
  for (const bool async : {true, false}) {
    const fs::path dir = dir_ / (async ? "async" : "sync");
    Saves s(dir, shard, async);
    EXPECT_EQ(s.saves.async(), async);
    for (int v = 1; v <= 2; ++v) {
      shard.fill(v);
      s.saves.save(manifest_of(v, c, shape));
    }
    s.saves.wait();
    EXPECT_EQ(s.saves.bytes(), ParamLayout(c).total() * 3 * sizeof(float));  // params, m, v
    on_root([&] {
      EXPECT_EQ(read_text(dir / "checkpoints" / "latest"), step_dir_name(2) + "\n");
    });
  }
  for (int v = 1; v <= 2; ++v) {
    Shard a(c, shape, world().rank(), ::Setup{1}), b(c, shape, world().rank(), ::Setup{1});
    CheckpointStore(dir_ / "async" / "checkpoints", world())
        .load((dir_ / "async" / "checkpoints" / step_dir_name(v)).string(), a.state());
    CheckpointStore(dir_ / "sync" / "checkpoints", world())
        .load((dir_ / "sync" / "checkpoints" / step_dir_name(v)).string(), b.state());
    EXPECT_TRUE(a.holds(v) && b.holds(v)) << "version " << v;
  }
}

// --async-save auto where the ranks' threads leave no CPU to a writer: synchronous saves until
// one takes kSlowSave s or more (the slowest rank's), the next ones in the background; rank 0
// pauses 2 s in the write of step 2, so step 3's goes in the background at the latest (step 2's
// where a loaded host made step 1's slow already); every step committed.
TEST_F(CheckpointTest, AutoSavesTurnToTheBackgroundAfterASlowOne) {
  if (!FaultPlan::kCompiledIn) GTEST_SKIP() << "built without fault injection";
  const ModelConfig c = small_model(Arch::Gpt2);
  const GridShape shape{world().size(), 1, 1};
  Shard shard(c, shape, world().rank(), ::Setup{});
  CpuBackend<float> backend(1);
  const MpiComm node = world().split_shared();
  TraceRecorder trace;  // off
  MetricsLog log(in_made_dir(dir_, "metrics.jsonl"), world().rank() == 0);
  CheckpointStore store((dir_ / "checkpoints").string(), world(), 0,
                        FaultPlan::parse("delay:phase=write:rank=0:step=2:seconds=2"));
  const CheckpointState live = shard.state();
  // planned, periodic, on the host, --async-save auto, no CPU for a writer
  const SavePlan plan = plan_saves({true, true, false, true, false}, live, node, world());
  EXPECT_FALSE(plan.async);
  EXPECT_TRUE(plan.async_when_slow);
  Checkpointer saves(plan, store, live, backend, log, trace);
  bool slow = false;  // a synchronous save so far took kSlowSave s or more
  for (int step = 1; step <= 3; ++step) {
    EXPECT_EQ(saves.async(), slow) << "step " << step;
    shard.fill(step);
    saves.save(manifest_of(step, c, shape));
    double seconds = saves.last_save_seconds();
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    slow = slow || seconds >= kSlowSave;
  }
  EXPECT_TRUE(saves.async());
  saves.wait();
  for (int step = 1; step <= 3; ++step) {
    Shard loaded(c, shape, world().rank(), ::Setup{});
    store.load((dir_ / "checkpoints" / step_dir_name(step)).string(), loaded.state());
    EXPECT_TRUE(loaded.holds(step)) << "step " << step;
  }
}

// A background save that fails (the store's directory is a file) fails in wait() on every rank,
// as the synchronous save fails in save().
TEST_F(CheckpointTest, BackgroundSaveFailureReachesWait) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const GridShape shape{world().size(), 1, 1};
  Shard shard(c, shape, world().rank());
  on_root([&] { std::ofstream(dir_ / "checkpoints") << "not a directory\n"; });
  Saves s(dir_, shard, true);
  s.saves.save(manifest_of(1, c, shape));
  EXPECT_THROW(s.saves.wait(), Error);
  Saves sync(dir_, shard, false);
  EXPECT_THROW(sync.saves.save(manifest_of(1, c, shape)), AgreedError);
}

// A failed background save surfaces through poll() at the same call on every rank (the ranks
// agree that every writer is done), not at the next save: a rank that threw a step earlier than
// another would leave it alone in the step's collectives.
TEST_F(CheckpointTest, BackgroundSaveFailureReachesEveryRankAtTheSamePoll) {
  const ModelConfig c = small_model(Arch::Gpt2);
  const GridShape shape{world().size(), 1, 1};
  Shard shard(c, shape, world().rank());
  on_root([&] { std::ofstream(dir_ / "checkpoints") << "not a directory\n"; });
  Saves s(dir_, shard, true);
  s.saves.save(manifest_of(1, c, shape));
  int polls = 0;
  bool failed = false;
  while (!failed && polls < 100000) {
    if (world().rank() == 1) usleep(1000);  // rank 1 polls later than the others
    try {
      s.saves.poll();
      ++polls;
    } catch (const AgreedError& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find("checkpoint " + step_dir_name(1) + ": "),
                std::string::npos)
          << e.what();
    }
  }
  EXPECT_TRUE(failed);
  int least = polls, most = polls;
  MPI_Allreduce(MPI_IN_PLACE, &least, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(least, most);
}
