// Reading one checkpoint file: every rank its own pieces, collectively, then verification.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/io/file_kind.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

void check_step_matches_dir(const CheckpointManifest& m, const std::string& dir) {
  std::string name = fs::path(dir).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
  if (name.size() > 4 && name.ends_with(".old")) name.resize(name.size() - 4);
  const std::optional<int64_t> step = parse_step_dir(name);
  if (step && *step != m.step)
    throw Error("manifest step " + std::to_string(m.step) + " but the directory is " + name);
}

H5Handle open_tensor(hid_t file, const std::string& path, const std::vector<uint64_t>* shape,
                     uint64_t& stored) {
  if (!has_link(file, path)) throw Error("dataset " + path + " is missing");
  if (const std::string kind = object_kind(file, path); kind != "dataset")
    throw Error("dataset " + path + " is a " + kind + ", not a dataset");
  H5Handle dset = open_dataset(file, path);
  const std::vector<uint64_t> dims = dataset_dims(dset.get());
  if (shape && dims != *shape)
    throw Error("dataset " + path + " has shape " + shape_text(dims) + ", expected " +
                shape_text(*shape));
  H5Handle type(H5_CHECK(H5Dget_type(dset.get())));
  if (H5_CHECK(H5Tget_class(type.get())) != H5T_FLOAT || H5Tget_size(type.get()) != 4)
    throw Error("dataset " + path + " is not float32");
  if (!has_attribute(dset.get(), kChecksumAttribute))
    throw Error("dataset " + path + " has no checksum");
  stored = read_attribute_uint64(dset.get(), kChecksumAttribute);
  return dset;
}

CheckpointManifest read_checkpoint(const std::string& dir, const MpiComm& world,
                                   const CheckpointState& s) {
  const std::string path = (fs::path(dir) / kCheckpointFile).string();
  H5Handle fapl, file;
  CheckpointManifest m;
  agree_on(world, path, [&] {
    if (const std::string why = not_regular_file_reason(path); !why.empty()) throw Error(why);
    fapl = mpio_file_access(world.get());
    file = open_file(path, H5F_ACC_RDONLY, fapl.get());
    m = read_manifest(file.get());
    check_step_matches_dir(m, dir);
  });
  if (world.rank() == 0 && m.format_version < kManifestChecksumVersion)
    std::fprintf(stderr,
                 "checkpoint: %s: WARNING: format version %lld has no manifest checksum (written "
                 "by an older build): its fields were range-checked only\n",
                 path.c_str(), static_cast<long long>(m.format_version));
  // The same manifest on every rank: these checks need no agreement.
  const std::string diff = model_differences(m.model, s.config);
  if (!diff.empty())
    throw UsageError(path + " holds another model than this run's (checkpoint vs run: " + diff +
                     ")");
  if (m.optimizer != s.optimizer)
    throw UsageError(path + " holds the state of optimizer " + to_string(m.optimizer) +
                     ", this run uses " + to_string(s.optimizer) + " (set optimizer to " +
                     to_string(m.optimizer) + " to resume from it)");

  const ParamLayout full(s.config);
  const std::vector<std::string> groups = checkpoint_groups(s.optimizer);
  std::vector<TensorParts> parts;                 // per tensor: this rank's copy and its parts
  std::vector<Selection> held_sels, owned_sels;   // params: the held part; state: the owned part
  std::vector<H5Handle> dsets;                    // [group][tensor]
  std::vector<std::string> names;
  std::vector<uint64_t> stored;
  agree_on(world, path, [&] {
    parts = tensor_parts(full, s);
    for (const ParamTensor& whole : full.tensors()) {
      const TensorParts& p = parts[whole.global_index];
      held_sels.push_back(select_range(whole, p.t, p.held.a, p.held.b));
      owned_sels.push_back(select_range(whole, p.t, p.owned.a, p.owned.b));
    }
    for (const std::string& group_name : groups) {
      if (!has_link(file.get(), group_name)) throw Error("group /" + group_name + " is missing");
      for (const ParamTensor& whole : full.tensors()) {
        names.push_back(dataset_path(group_name, whole.name));
        const std::vector<uint64_t> shape(whole.global_shape.begin(), whole.global_shape.end());
        dsets.push_back(open_tensor(file.get(), names.back(), &shape, stored.emplace_back()));
      }
    }
  });

  // Every rank reads its own elements; a rank's failure is carried to the agreement below so
  // that it keeps taking part in the remaining collective reads. The writers' owned parts, in
  // the copies that count once, add up to every element once: their checksums are the datasets'.
  const H5Handle dxpl = collective_transfer();
  float unused = 0.0f;
  std::vector<uint64_t> sums(dsets.size(), 0);
  std::string failure;
  const size_t n = full.tensors().size();
  for (size_t k = 0; k < dsets.size(); ++k) {
    const size_t g = k / n;
    const TensorParts& p = parts[k % n];
    const TensorPart& part = g == 0 ? p.held : p.owned;
    float* data = &unused;  // where the part's first element goes
    if (part.a < part.b) data = (g == 0 ? s.params : s.state[g - 1]) + part.at;
    const Selection& sel = g == 0 ? held_sels[k % n] : owned_sels[k % n];
    try {
      H5_CHECK(H5Dread(dsets[k].get(), H5T_NATIVE_FLOAT, sel.memory.get(), sel.file.get(),
                       dxpl.get(), data));
    } catch (const std::exception& e) {
      if (failure.empty()) failure = "dataset " + names[k] + ": " + e.what();
    }
    const TensorPart& o = p.owned;
    if (p.t && p.t->primary && (p.t->ep_split ? s.expert_writer : s.writer) && o.a < o.b)
      sums[k] = range_checksum(*p.t, g == 0 ? data + (o.a - p.held.a) : data, o.a, o.b);
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
  // A separate master takes the fp32 values; the compute copy is rounded as the optimizer keeps it.
  if (s.separate_master) {
    for (const TensorParts& p : parts) {
      const auto [a, b, at] = p.owned;
      if (a >= b) continue;
      const float* from = s.params + p.held.at + (a - p.held.a);
      std::copy(from, from + (b - a), s.master + at);
    }
    for (size_t i = 0; i < s.params_held.size(); ++i)
      s.params[i] = round_to(s.params[i], s.precision);
  }
  return m;
}

}  // namespace mpitrain
