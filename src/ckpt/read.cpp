// Reading one checkpoint file: every rank its own pieces, collectively, then verification.
#include <filesystem>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// The manifest must be of this format and, in a step-N directory, of step N.
void check_manifest(const CheckpointManifest& m, const std::string& dir) {
  if (m.format_version != kCheckpointFormatVersion)
    throw Error("manifest format_version " + std::to_string(m.format_version) +
                ", this build reads " + std::to_string(kCheckpointFormatVersion));
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
  if (name.size() > 4 && name.ends_with(".old")) name.resize(name.size() - 4);
  const std::optional<int64_t> step = parse_step_dir(name);
  if (step && *step != m.step)
    throw Error("manifest step " + std::to_string(m.step) + " but the directory is " + name);
}

// A dataset of the full logical shape, float32, with a checksum.
H5Handle open_tensor(hid_t group, const std::string& path, const ParamTensor& whole,
                     uint64_t& stored) {
  if (!has_link(group, whole.name)) throw Error("dataset " + path + " is missing");
  H5Handle dset = open_dataset(group, whole.name);
  const std::vector<uint64_t> dims = dataset_dims(dset.get());
  const std::vector<uint64_t> want(whole.global_shape.begin(), whole.global_shape.end());
  if (dims != want)
    throw Error("dataset " + path + " has shape " + shape_text(dims) + ", expected " +
                shape_text(want));
  H5Handle type(H5_CHECK(H5Dget_type(dset.get())));
  if (H5_CHECK(H5Tget_class(type.get())) != H5T_FLOAT || H5Tget_size(type.get()) != 4)
    throw Error("dataset " + path + " is not float32");
  if (!has_attribute(dset.get(), kChecksumAttribute))
    throw Error("dataset " + path + " has no checksum");
  stored = read_attribute_uint64(dset.get(), kChecksumAttribute);
  return dset;
}

}  // namespace

CheckpointManifest read_checkpoint(const std::string& dir, const MpiComm& world,
                                   const CheckpointState& s) {
  const std::string path = (fs::path(dir) / kCheckpointFile).string();
  H5Handle fapl, file;
  CheckpointManifest m;
  agree_on(world, path, [&] {
    if (!fs::is_regular_file(path)) throw Error("no such file");
    fapl = mpio_file_access(world.get());
    file = open_file(path, H5F_ACC_RDONLY, fapl.get());
    m = read_manifest(file.get());
    check_manifest(m, dir);
  });
  // The same manifest on every rank: this check needs no agreement.
  const std::string diff = model_differences(m.model, s.config);
  if (!diff.empty())
    throw UsageError(path + " holds another model than this run's (checkpoint vs run: " + diff +
                     ")");

  const ParamLayout full(s.config);
  std::vector<const ParamTensor*> held;  // per tensor: this rank's part, or nullptr
  std::vector<Selection> sels;
  std::vector<H5Handle> dsets;  // [group][tensor]
  std::vector<std::string> names;
  std::vector<uint64_t> stored;
  agree_on(world, path, [&] {
    held = held_tensors(full, s.layout);
    for (const ParamTensor& whole : full.tensors())
      sels.push_back(select_pieces(whole, held[whole.global_index]));
    for (const char* group_name : kStateGroups) {
      if (!has_link(file.get(), group_name))
        throw Error("group /" + std::string(group_name) + " is missing");
      H5Handle group(H5_CHECK(H5Gopen2(file.get(), group_name, H5P_DEFAULT)));
      for (const ParamTensor& whole : full.tensors()) {
        names.push_back(dataset_path(group_name, whole.name));
        dsets.push_back(open_tensor(group.get(), names.back(), whole, stored.emplace_back()));
      }
    }
  });

  // Every rank reads its own pieces; a rank's failure is carried to the agreement below so that
  // it keeps taking part in the remaining collective reads.
  const H5Handle dxpl = collective_transfer();
  float* const buffers[3] = {s.params, s.adam_m, s.adam_v};
  float unused = 0.0f;
  std::vector<uint64_t> sums(dsets.size(), 0);
  std::string failure;
  const size_t n = full.tensors().size();
  for (size_t k = 0; k < dsets.size(); ++k) {
    const ParamTensor* t = held[k % n];
    const Selection& sel = sels[k % n];
    float* data = t ? buffers[k / n] + t->offset : &unused;
    try {
      H5_CHECK(H5Dread(dsets[k].get(), H5T_NATIVE_FLOAT, sel.memory.get(), sel.file.get(),
                       dxpl.get(), data));
    } catch (const std::exception& e) {
      if (failure.empty()) failure = "dataset " + names[k] + ": " + e.what();
    }
    if (t && t->primary && s.dp_writer) sums[k] = shard_checksum(*t, data);
  }
  agree_on(world, path, [&] {
    if (!failure.empty()) throw Error(failure);
  });
  dsets.clear();
  file.close();

  // Checksums: the ranks that count once contribute; every rank compares the same totals.
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sums.data(), static_cast<int>(sums.size()), MPI_UINT64_T,
                          MPI_SUM, world.get()));
  std::string bad;
  int n_bad = 0;
  for (size_t k = 0; k < sums.size(); ++k) {
    if (sums[k] == stored[k]) continue;
    if (++n_bad <= 3) {
      if (!bad.empty()) bad += "; ";
      bad += "dataset " + names[k] + ": checksum mismatch (stored " + hex_text(stored[k]) +
             ", computed " + hex_text(sums[k]) + ")";
    }
  }
  if (n_bad > 3) bad += "; and " + std::to_string(n_bad - 3) + " more";
  if (!bad.empty()) throw Error(path + ": " + bad);
  return m;
}

}  // namespace mpitrain
