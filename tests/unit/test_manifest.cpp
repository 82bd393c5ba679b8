// The checkpoint manifest on a real HDF5 file: its checksum finds a changed attribute, every
// field's range is checked on read, and files of format version 2 (no checksum) still read.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <string>

#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/io/hdf5.hpp"

using namespace mpitrain;

namespace {

CheckpointManifest sample_manifest() {  // a checkpoint of step 6 as a save writes it
  CheckpointManifest m;
  m.step = 6;
  m.consumed_samples = 48;
  m.seed = 1234;
  m.adam_steps = 6;
  m.loss_scale = 1.0;
  m.loss_scale_clean_steps = 6;
  m.val_loss = 2.5;
  m.model.n_layer = 2;
  m.model.d_model = 64;
  m.model.d_ff = 256;
  m.model.max_seq_len = 32;
  m.layout = GridShape{2, 1, 1};
  m.global_batch_size = 8;
  m.micro_batch_size = 2;
  m.seq_len = 32;
  return m;
}

class ManifestTest : public ::testing::Test {  // one file in a fresh temporary directory
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "mpitrain-manifest-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void write(const CheckpointManifest& m) {
    H5Handle file = create_file(path());
    write_manifest(file.get(), m, true);
  }
  // Changes /manifest in place (attributes as a hostile or broken writer leaves them).
  void edit(const std::function<void(hid_t manifest)>& change) {
    H5Handle file = open_file(path(), H5F_ACC_RDWR);
    H5Handle group(H5_CHECK(H5Gopen2(file.get(), kManifestGroup, H5P_DEFAULT)));
    change(group.get());
  }
  // read_manifest's Error message, "" if it reads.
  std::string read_error() {
    H5Handle file = open_file(path());
    try {
      read_manifest(file.get());
    } catch (const UsageError& e) {
      return std::string("UsageError: ") + e.what();  // damage is never the user's input
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::string path() const { return (dir_ / "checkpoint.h5").string(); }

  std::filesystem::path dir_;
};

}  // namespace

TEST_F(ManifestTest, RoundTripsWithAChecksum) {
  const CheckpointManifest m = sample_manifest();
  write(m);
  H5Handle file = open_file(path());
  EXPECT_EQ(manifest_fields(read_manifest(file.get())), manifest_fields(m));
  H5Handle group(H5_CHECK(H5Gopen2(file.get(), kManifestGroup, H5P_DEFAULT)));
  EXPECT_TRUE(has_attribute(group.get(), kChecksumAttribute));
}

TEST_F(ManifestTest, AFlippedBitIsAChecksumMismatch) {
  write(sample_manifest());
  edit([](hid_t g) { write_attribute_int(g, "adam_steps", 2); });  // 6 -> 2: one bit
  EXPECT_NE(read_error().find("manifest checksum mismatch (stored 0x"), std::string::npos)
      << read_error();
}

TEST_F(ManifestTest, EveryFieldOutOfRangeIsNamed) {
  struct Case {
    std::function<void(CheckpointManifest&)> change;
    std::string expected;
  };
  const Case cases[] = {
      {[](auto& m) { m.consumed_samples = static_cast<uint64_t>(-7); },
       "manifest consumed_samples 18446744073709551609 (-7 as a signed number) is out of range"},
      {[](auto& m) { m.consumed_samples = 5; }, "manifest consumed_samples 5 is out of range"},
      {[](auto& m) { m.step = -1; }, "manifest step -1 is out of range"},
      {[](auto& m) { m.step = int64_t{1} << 40; }, "manifest step 1099511627776 is out of range"},
      {[](auto& m) { m.adam_steps = 7; }, "manifest adam_steps 7 is out of range"},
      {[](auto& m) { m.adam_steps = -2; }, "manifest adam_steps -2 is out of range"},
      {[](auto& m) { m.skipped_steps = 1; }, "manifest skipped_steps 1 is out of range"},
      {[](auto& m) { m.loss_scale_clean_steps = -1; }, "manifest loss_scale_clean_steps -1"},
      {[](auto& m) { m.loss_scale = std::numeric_limits<double>::infinity(); },
       "manifest loss_scale inf is out of range"},
      {[](auto& m) { m.loss_scale = 0; }, "manifest loss_scale 0 is out of range"},
      {[](auto& m) { m.val_loss = -1; }, "manifest val_loss -1 is out of range"},
      {[](auto& m) { m.model.n_head = 0; }, "manifest model: n-head must be at least 1"},
      {[](auto& m) { m.model.vocab_size = 1; }, "manifest model: vocab-size must be at least 2"},
      {[](auto& m) { m.layout.tp = 0; }, "manifest tp 0 is out of range"},
      {[](auto& m) { m.micro_batch_size = 9; }, "manifest micro_batch_size 9 is out of range"},
      {[](auto& m) { m.global_batch_size = 0; }, "manifest global_batch_size 0 is out of range"},
      {[](auto& m) { m.seq_len = 33; }, "manifest seq_len 33 is out of range"},
      {[](auto& m) { m.lr_decay_steps = -3; }, "manifest lr_decay_steps -3 is out of range"},
      {[](auto& m) { m.shuffle = "yes"; }, "manifest shuffle yes is out of range"},
      {[](auto& m) { m.moe_aux_loss_coef = std::nan(""); },
       "manifest moe_aux_loss_coef nan is out of range"},
      {[](auto& m) { m.moe_z_loss_coef = std::numeric_limits<double>::infinity(); },
       "manifest moe_z_loss_coef inf is out of range"},
  };
  for (const Case& c : cases) {
    CheckpointManifest m = sample_manifest();
    c.change(m);
    write(m);  // with a checksum that matches: only the range check can find these
    const std::string err = read_error();
    EXPECT_NE(err.find(c.expected), std::string::npos) << c.expected << " -> " << err;
  }
  CheckpointManifest none = sample_manifest();
  none.val_loss = std::nan("");  // no validation yet
  write(none);
  EXPECT_EQ(read_error(), "");
}

TEST_F(ManifestTest, Version2WithoutChecksumReadsButVersion3MustHaveOne) {
  write(sample_manifest());
  edit([](hid_t g) { H5_CHECK(H5Adelete(g, kChecksumAttribute)); });
  EXPECT_NE(read_error().find("manifest has no checksum (format version 3 files have one)"),
            std::string::npos)
      << read_error();
  edit([](hid_t g) { write_attribute_int(g, "format_version", 2); });  // an older build's file
  EXPECT_EQ(read_error(), "");
  edit([](hid_t g) { write_attribute_int(g, "consumed_samples", -7); });  // ranges still count
  EXPECT_NE(read_error().find("consumed_samples"), std::string::npos) << read_error();
}

TEST_F(ManifestTest, AVersionFlippedDownIsStillChecked) {
  write(sample_manifest());
  edit([](hid_t g) { write_attribute_int(g, "format_version", 2); });  // 3 -> 2: one bit
  EXPECT_NE(read_error().find("manifest checksum mismatch"), std::string::npos) << read_error();
}

// The schedule's length, the sample order and the kept settings (fields added within format
// version 3): written
// and checksummed when recorded; a file written before them (no attribute) reads as not recorded
// (0, "") and its checksum still holds.
TEST_F(ManifestTest, FieldsAddedWithinVersion3AreOptional) {
  CheckpointManifest m = sample_manifest();
  m.lr_decay_steps = 150;
  m.shuffle = "false";
  m.settings = "precision = bf16\nlr = 0.001\n";
  write(m);
  {
    H5Handle file = open_file(path());
    EXPECT_EQ(read_manifest(file.get()).lr_decay_steps, 150);
    EXPECT_EQ(read_manifest(file.get()).shuffle, "false");
    EXPECT_EQ(read_manifest(file.get()).settings, "precision = bf16\nlr = 0.001\n");
  }
  edit([](hid_t g) { write_attribute_int(g, "lr_decay_steps", 90); });
  EXPECT_NE(read_error().find("manifest checksum mismatch"), std::string::npos) << read_error();
  write(m);
  edit([](hid_t g) { write_attribute_string(g, "shuffle", "true"); });
  EXPECT_NE(read_error().find("manifest checksum mismatch"), std::string::npos) << read_error();
  write(sample_manifest());  // as a build from before the fields wrote it
  H5Handle file = open_file(path());
  H5Handle group(H5_CHECK(H5Gopen2(file.get(), kManifestGroup, H5P_DEFAULT)));
  for (const char* name : {"lr_decay_steps", "shuffle", "settings"})
    EXPECT_FALSE(has_attribute(group.get(), name)) << name;
  EXPECT_EQ(read_manifest(file.get()).lr_decay_steps, 0);
  EXPECT_EQ(read_manifest(file.get()).shuffle, "");
  EXPECT_EQ(read_manifest(file.get()).settings, "");
}

// The model features (fields added within format version 3): recorded and checksummed where they
// differ from the arch's defaults; a file without them (an older build's) reads with the arch's
// defaults, its old meaning: a llama with its own head and no biases, a gpt2 tied with biases.
TEST_F(ManifestTest, ModelFeaturesAreRecordedAndOlderFilesKeepTheirMeaning) {
  CheckpointManifest m = sample_manifest();
  m.model.set_arch(Arch::Llama);
  m.model.tie_embeddings = m.model.qkv_bias = m.model.mlp_bias = true;
  m.model.head_dim = 12;
  m.model.sliding_window = 4096;  // a Mistral model's window: every resume's seq-len is held to it
  write(m);
  {
    H5Handle file = open_file(path());
    const ModelConfig back = read_manifest(file.get()).model;
    EXPECT_TRUE(back.tie_embeddings && back.qkv_bias && !back.proj_bias && back.mlp_bias);
    EXPECT_EQ(back.head_dim, 12);
    EXPECT_EQ(back.sliding_window, 4096);
    EXPECT_NE(model_differences(back, sample_manifest().model).find("sliding_window 4096 vs 0"),
              std::string::npos);
    EXPECT_EQ(manifest_fields(read_manifest(file.get())), manifest_fields(m));
  }
  edit([](hid_t g) { write_attribute_int(g, "qkv_bias", 0); });
  EXPECT_NE(read_error().find("manifest checksum mismatch"), std::string::npos) << read_error();
  for (Arch arch : {Arch::Llama, Arch::Gpt2}) {
    CheckpointManifest old = sample_manifest();
    old.model.set_arch(arch);
    write(old);
    H5Handle file = open_file(path());
    H5Handle group(H5_CHECK(H5Gopen2(file.get(), kManifestGroup, H5P_DEFAULT)));
    for (const char* name :
         {"tie_embeddings", "qkv_bias", "proj_bias", "mlp_bias", "head_dim", "sliding_window"})
      EXPECT_FALSE(has_attribute(group.get(), name)) << name;
    const ModelConfig back = read_manifest(file.get()).model;
    const bool gpt2 = arch == Arch::Gpt2;
    EXPECT_EQ(back.tie_embeddings, gpt2);
    EXPECT_EQ(back.qkv_bias && back.proj_bias && back.mlp_bias, gpt2);
    EXPECT_EQ(back.qkv_bias || back.proj_bias || back.mlp_bias, gpt2);
    EXPECT_EQ(back.head_dim, 0);
    EXPECT_EQ(back.sliding_window, 0);
  }
}

// The mixture-of-experts fields: recorded and checksummed where they differ from the defaults; a
// dense model's manifest has none of them (its attributes and checksum as before the fields), and
// reads back dense.
TEST_F(ManifestTest, ExpertFieldsAreRecordedOnlyForAnMoeModel) {
  const char* names[] = {"n_experts",         "top_k",          "moe_ff",
                         "n_shared_experts",  "moe_every",      "moe_first_dense",
                         "moe_norm_topk",     "moe_sigmoid",    "moe_route_scale",
                         "moe_groups",        "moe_group_topk", "moe_shared_gate",
                         "moe_aux_loss_coef", "moe_z_loss_coef"};
  CheckpointManifest m = sample_manifest();
  m.model.set_arch(Arch::Llama);
  m.model.n_experts = 4;
  m.model.top_k = 1;
  m.model.moe_ff = 96;
  m.model.n_shared_experts = 1;
  m.model.moe_shared_gate = true;
  m.model.moe_every = 2;
  m.model.moe_first_dense = 1;
  m.model.moe_norm_topk = false;
  m.model.moe_sigmoid = true;
  m.model.moe_route_scale = 2.5f;
  m.model.moe_groups = 2;
  m.model.moe_group_topk = 1;
  m.moe_aux_loss_coef = 0.02;
  m.moe_z_loss_coef = 0;  // recorded: 0 is a choice, not "not recorded"
  write(m);
  {
    H5Handle file = open_file(path());
    const ModelConfig back = read_manifest(file.get()).model;
    EXPECT_EQ(back.n_experts, 4);
    EXPECT_EQ(back.top_k, 1);
    EXPECT_EQ(back.moe_ff, 96);
    EXPECT_EQ(back.n_shared_experts, 1);
    EXPECT_TRUE(back.moe_shared_gate);
    EXPECT_EQ(back.moe_every, 2);
    EXPECT_EQ(back.moe_first_dense, 1);
    EXPECT_FALSE(back.moe_norm_topk);
    EXPECT_TRUE(back.moe_sigmoid);
    EXPECT_EQ(back.moe_route_scale, 2.5f);
    EXPECT_EQ(back.moe_groups, 2);
    EXPECT_EQ(back.moe_group_topk, 1);
    EXPECT_EQ(read_manifest(file.get()).moe_aux_loss_coef, 0.02);
    EXPECT_EQ(read_manifest(file.get()).moe_z_loss_coef, 0.0);
    EXPECT_EQ(manifest_fields(read_manifest(file.get())), manifest_fields(m));
    EXPECT_NE(model_differences(back, sample_manifest().model).find("n_experts 4 vs 0"),
              std::string::npos);
  }
  edit([](hid_t g) { write_attribute_int(g, "n_experts", 8); });
  EXPECT_NE(read_error().find("manifest checksum mismatch"), std::string::npos) << read_error();
  write(m);
  edit([](hid_t g) { write_attribute_double(g, "moe_aux_loss_coef", 0.5); });
  EXPECT_NE(read_error().find("manifest checksum mismatch"), std::string::npos) << read_error();
  CheckpointManifest dense = sample_manifest();
  dense.model.set_arch(Arch::Llama);
  write(dense);
  H5Handle file = open_file(path());
  H5Handle group(H5_CHECK(H5Gopen2(file.get(), kManifestGroup, H5P_DEFAULT)));
  for (const char* name : names) EXPECT_FALSE(has_attribute(group.get(), name)) << name;
  for (const auto& [name, value] : manifest_fields(dense))
    for (const char* moe : names) EXPECT_NE(name, moe);  // so its checksum is unchanged
  EXPECT_EQ(read_manifest(file.get()).model.n_experts, 0);
}

// A --moe-expert-bias model's router biases: the dataset /manifest/expert_bias (MoE layers x
// experts) reads back bit for bit; a changed value is its checksum mismatch, a missing table or
// one of another shape is named, and a model without the bias has none.
TEST_F(ManifestTest, TheExpertBiasTableIsKeptAndChecked) {
  CheckpointManifest m = sample_manifest();
  m.model.set_arch(Arch::Llama);
  m.model.n_layer = 4;
  m.model.n_experts = 3;
  m.model.moe_every = 2;  // MoE layers 1 and 3
  m.model.moe_sigmoid = m.model.moe_expert_bias = true;
  m.expert_bias = {0.001f, -0.002f, 0.0f, 0.5f, -0.25f, 1e-7f};
  write(m);
  {
    H5Handle file = open_file(path());
    const CheckpointManifest back = read_manifest(file.get());
    EXPECT_EQ(back.expert_bias, m.expert_bias);
    EXPECT_EQ(manifest_fields(back), manifest_fields(m));
    EXPECT_EQ(dataset_dims(open_dataset(file.get(), "/manifest/expert_bias").get()),
              (std::vector<uint64_t>{2, 3}));
  }
  {  // one value changed in place, its checksum attribute left
    H5Handle file = open_file(path(), H5F_ACC_RDWR);
    H5Handle dset = open_dataset(file.get(), "/manifest/expert_bias");
    std::vector<float> changed = m.expert_bias;
    changed[4] = 0.25f;
    write_all(dset.get(), H5T_NATIVE_FLOAT, changed.data());
  }
  EXPECT_NE(read_error().find("dataset /manifest/expert_bias: checksum mismatch (stored 0x"),
            std::string::npos)
      << read_error();
  edit([](hid_t g) { H5_CHECK(H5Ldelete(g, "expert_bias", H5P_DEFAULT)); });
  EXPECT_NE(read_error().find("dataset /manifest/expert_bias is missing"), std::string::npos)
      << read_error();
  CheckpointManifest wider = m;  // a table of 3 layers' rows for a model of 2 MoE layers
  wider.model.moe_every = 1;
  wider.expert_bias.resize(12);
  write(wider);
  edit([](hid_t g) {
    write_attribute_int(g, "moe_every", 2);  // the shape no longer the model's
  });
  EXPECT_NE(read_error().find("has shape 4x3, expected 2x3"), std::string::npos) << read_error();
  CheckpointManifest plain = m;
  plain.model.moe_expert_bias = false;
  plain.expert_bias.clear();
  write(plain);
  H5Handle file = open_file(path());
  EXPECT_FALSE(has_link(file.get(), "/manifest/expert_bias"));
  EXPECT_TRUE(read_manifest(file.get()).expert_bias.empty());
}
