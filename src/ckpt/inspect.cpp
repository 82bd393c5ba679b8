// ckpt-inspect's work: a checkpoint's manifest and datasets, and optionally their checksums.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/ckpt/resume_source.hpp"
#include "mpitrain/io/file_kind.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// The checkpoint file that path means, found as --resume finds it (problem: what `latest` said
// when it named no checkpoint; newer: why a checkpoint newer than `latest`'s is shown); Error
// with the reason if there is none.
std::string find_file(const std::string& path, std::string& problem, std::string& newer) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) return path;
  if (resolve_dir(path).empty()) throw Error("it " + not_regular_file_reason(path));
  const ResumeSource source = locate_checkpoints(path);
  if (!source.step.empty()) return (fs::path(source.step) / kCheckpointFile).string();
  const std::string& dir = source.checkpoints;
  if (const std::optional<NewerCheckpoint> found = newer_than_latest(dir)) {
    newer = found->note(dir);
    return (fs::path(found->dir) / kCheckpointFile).string();
  }
  const std::vector<std::string> found = checkpoint_candidates(dir, problem);
  if (found.empty())
    throw Error(problem.empty() ? "neither " + std::string(kCheckpointFile) +
                                      " nor a checkpoint (latest, step-N/, checkpoints/) in it"
                                : problem);
  return (fs::path(found.front()) / kCheckpointFile).string();
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

struct TensorName {
  std::string name;
  std::optional<std::vector<uint64_t>> shape;  // the model's, when the manifest is readable
};

// The tensors: the model's list when the manifest is readable, else what the file holds.
std::vector<TensorName> tensor_names(hid_t file, const std::optional<CheckpointManifest>& m) {
  std::vector<TensorName> out;
  if (m) {
    const ParamLayout layout(m->model);
    for (const ParamTensor& t : layout.tensors())
      out.push_back({t.name, std::vector<uint64_t>(t.global_shape.begin(), t.global_shape.end())});
  } else if (has_link(file, kParamsGroup)) {
    std::vector<std::string> names;
    H5Handle group(H5_CHECK(H5Gopen2(file, kParamsGroup, H5P_DEFAULT)));
    H5_CHECK(H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names));
    for (std::string& name : names) out.push_back({std::move(name), std::nullopt});
  }
  return out;
}

// The tensor groups: the optimizer's when the manifest is readable, else those the file holds.
std::vector<std::string> group_names(hid_t file, const std::optional<CheckpointManifest>& m) {
  if (m) return checkpoint_groups(m->optimizer);
  std::vector<std::string> names;
  H5_CHECK(H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names));
  std::erase(names, std::string(kManifestGroup));
  return names;
}

// One table row (without the newline) for dataset path, checked as the loader checks it (a
// problem throws); bad is set on a problem found.
std::string row(hid_t file, const std::string& path,
                const std::optional<std::vector<uint64_t>>& shape, bool verify, bool& bad) {
  if (!has_link(file, path)) {
    bad = true;
    return "MISSING";
  }
  uint64_t stored = 0;
  H5Handle dset = open_tensor(file, path, shape ? &*shape : nullptr, stored);
  const std::vector<uint64_t> dims = dataset_dims(dset.get());
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  char text[96];
  std::snprintf(text, sizeof text, "%-14s %-18s", shape_text(dims).c_str(),
                hex_text(stored).c_str());
  const std::string out = text;
  if (!verify) return out;
  std::vector<float> data(n);
  H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  const uint64_t computed = checksum(data.data(), 0, n);
  if (computed == stored) return out + " OK";
  bad = true;
  return out + " MISMATCH (computed " + hex_text(computed) + ")";
}

}  // namespace

int inspect_checkpoint(const std::string& path, bool verify, std::ostream& out, std::ostream& err) {
  std::string file_path, latest_problem, newer;
  H5Handle file;
  try {
    file_path = find_file(path, latest_problem, newer);
    if (!is_hdf5_file(file_path) && not_regular_file_reason(file_path).empty())
      throw Error("'" + file_path + "' is not an HDF5 file (no HDF5 signature)");
    file = open_file(file_path);
    if (!has_link(file.get(), kManifestGroup) && !has_link(file.get(), kParamsGroup))
      throw Error("'" + file_path + "' holds neither /manifest nor /params: an HDF5 file, but " +
                  "not a checkpoint");
  } catch (const std::exception& e) {
    err << "ckpt-inspect: no readable checkpoint at '" << path << "': " << e.what() << "\n";
    return 2;
  }
  bool bad = !latest_problem.empty();
  if (bad)
    out << "latest: BAD: " << latest_problem << "; showing the newest, as the trainer would\n";
  if (!newer.empty()) out << "newer: " << newer << ": showing it, as --resume takes it\n";
  out << "checkpoint " << file_path << "\n";
  std::optional<CheckpointManifest> m;
  try {
    m = read_manifest(file.get());
    out << "manifest\n";
    for (const auto& [name, value] : manifest_fields(*m)) {
      char line[64];
      std::snprintf(line, sizeof line, "  %-22s ", name.c_str());
      out << line << value << "\n";
    }
    check_step_matches_dir(*m, fs::path(file_path).parent_path().string());
    out << (m->format_version >= kManifestChecksumVersion
                ? "manifest: checksum OK, every field in range\n"
                : "manifest: no checksum (format version " + std::to_string(m->format_version) +
                      ", an older build), every field in range\n");
  } catch (const std::exception& e) {
    bad = true;
    out << "manifest: BAD: " << e.what() << "\n";
  }
  const std::vector<TensorName> names = tensor_names(file.get(), m);
  size_t width = 8;
  for (const TensorName& n : names) width = std::max(width, n.name.size() + 9);
  char header[160];
  std::snprintf(header, sizeof header, "%-*s %-14s %-18s%s\n", static_cast<int>(width), "dataset",
                "shape", "checksum", verify ? " verify" : "");
  out << header;
  for (const std::string& group : group_names(file.get(), m)) {
    if (!has_link(file.get(), group)) {
      bad = true;
      out << "/" << group << " MISSING\n";
      continue;
    }
    for (const TensorName& name : names) {
      const std::string dset = dataset_path(group, name.name);
      std::string text;
      try {
        text = row(file.get(), dset, name.shape, verify, bad);
      } catch (const std::exception& e) {
        bad = true;
        text = std::string("BAD: ") + e.what();
      }
      char label[160];
      std::snprintf(label, sizeof label, "%-*s ", static_cast<int>(width), dset.c_str());
      out << label << text << "\n";
    }
  }
  if (verify) out << (bad ? "verify: FAILED\n" : "verify: all checksums OK\n");
  return bad ? 1 : 0;
}

}  // namespace mpitrain
