// ranks: 2 4
// Parallel checkpoints: saved under one dp x tp x pp layout and loaded under every other (down to
// one rank), bit for bit; the commit protocol's directory states; damage found, named and
// skipped. The buffers hold known values of (version, buffer, tensor, element): no trainer.
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

#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"
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
  c.arch = arch;
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

// The value of element i of tensor g in buffer b (0 params, 1 adam_m, 2 adam_v) of version v:
// a 24-bit integer times 2^-23, exact in float.
float value(int v, int b, int g, uint64_t i) {
  uint64_t x = (static_cast<uint64_t>(v) << 56) ^ (static_cast<uint64_t>(b) << 48) ^
               (static_cast<uint64_t>(g) << 36) ^ i;
  x = (x ^ (x >> 31)) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  return static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) * 0x1p-23f;
}

// One rank's part of the model under a grid shape, and its three buffers.
struct Shard {
  const ModelConfig& config;
  ParamLayout layout;
  bool dp_writer;
  std::vector<float> buffers[3];

  Shard(const ModelConfig& c, const GridShape& shape, int rank)
      : config(c),
        layout(c, shard_of(shape, pipeline_layer_split(c.n_layer, shape.pp, ""), rank % shape.tp,
                           rank / (shape.tp * shape.dp))),
        dp_writer((rank / shape.tp) % shape.dp == 0) {
    for (auto& b : buffers) b.assign(layout.total(), -7.0f);
  }
  Shard(const ModelConfig& c, const MpiComm& comm)
      : Shard(c, GridShape{comm.size(), 1, 1}, comm.rank()) {}

  CheckpointState state() {
    return {config, layout, buffers[0].data(), buffers[1].data(), buffers[2].data(), dp_writer};
  }
  // Every buffer set to version v's values, through take_shard from full tensors.
  void fill(int v) {
    const ParamLayout full(config);
    for (const ParamTensor& t : layout.tensors()) {
      const ParamTensor& whole = full.tensors()[t.global_index];
      std::vector<float> values(whole.numel);
      for (int b = 0; b < 3; ++b) {
        for (uint64_t i = 0; i < whole.numel; ++i) values[i] = value(v, b, t.global_index, i);
        take_shard(t, values.data(), buffers[b].data() + t.offset);
      }
    }
  }
  // Do the buffers hold version v, bit for bit?
  bool holds(int v) const {
    Shard expected(config, layout);
    expected.fill(v);
    for (int b = 0; b < 3; ++b)
      if (std::memcmp(buffers[b].data(), expected.buffers[b].data(), buffers[b].size() * 4) != 0)
        return false;
    return true;
  }

 private:
  Shard(const ModelConfig& c, const ParamLayout& l) : config(c), layout(l), dp_writer(true) {
    for (auto& b : buffers) b.assign(layout.total(), 0.0f);
  }
};

CheckpointManifest manifest_of(int v, const ModelConfig& c, const GridShape& shape) {
  CheckpointManifest m;
  m.step = v;
  m.consumed_samples = 1000 + v;
  m.seed = 0xfedcba9876543210ull + v;  // beyond int64
  m.adam_steps = v;
  m.loss_scale = v % 2 ? 65536.0 : 1.0;
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
  EXPECT_EQ(got.build_id, MPITRAIN_BUILD_ID);
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
      for (const char* g : kStateGroups)
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
    EXPECT_NE(ok.str().find("consumed_samples   1001"), std::string::npos) << ok.str();
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
    H5Handle f2 = open_file(file(2), H5F_ACC_RDWR);
    H5Handle manifest(H5_CHECK(H5Gopen2(f2.get(), kManifestGroup, H5P_DEFAULT)));
    write_attribute_int(manifest.get(), "step", 7);
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
