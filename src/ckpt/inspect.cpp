// ckpt-inspect's work: a checkpoint's manifest and datasets, and optionally their checksums.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "ckpt_io.hpp"
#include "mpitrain/ckpt/format.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// The checkpoint file that path means; Error with the reason if there is none.
std::string find_file(const std::string& path) {
  if (fs::is_regular_file(path)) return path;
  const std::string dir = resolve_dir(path);
  if (dir.empty()) throw Error("no such file or directory");
  const fs::path file = fs::path(dir) / kCheckpointFile;
  if (fs::is_regular_file(file)) return file.string();
  const fs::path latest = fs::path(dir) / "latest";
  if (!fs::exists(latest))
    throw Error("neither " + std::string(kCheckpointFile) + " nor latest in it");
  std::string name;
  std::getline(std::ifstream(latest), name);
  const std::string named = name.empty() ? "" : resolve_dir((fs::path(dir) / name).string());
  if (named.empty()) throw Error("latest names '" + name + "', which is not there");
  return (fs::path(named) / kCheckpointFile).string();
}

herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// The tensor names: the model's list when the manifest is readable, else what the file holds.
std::vector<std::string> tensor_names(hid_t file, const std::optional<CheckpointManifest>& m) {
  std::vector<std::string> names;
  if (m) {
    const ParamLayout layout(m->model);
    for (const ParamTensor& t : layout.tensors()) names.push_back(t.name);
  } else if (has_link(file, kParamsGroup)) {
    H5Handle group(H5_CHECK(H5Gopen2(file, kParamsGroup, H5P_DEFAULT)));
    H5_CHECK(H5Literate(group.get(), H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names));
  }
  return names;
}

// The tensor groups: the optimizer's when the manifest is readable, else those the file holds.
std::vector<std::string> group_names(hid_t file, const std::optional<CheckpointManifest>& m) {
  if (m) return checkpoint_groups(m->optimizer);
  std::vector<std::string> names;
  H5_CHECK(H5Literate(file, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_name, &names));
  std::erase(names, std::string(kManifestGroup));
  return names;
}

// One table row (without the newline) for dataset path; bad is set on a problem found.
std::string row(hid_t file, const std::string& path, bool verify, bool& bad) {
  if (!has_link(file, path)) {
    bad = true;
    return "MISSING";
  }
  H5Handle dset = open_dataset(file, path);
  const std::vector<uint64_t> dims = dataset_dims(dset.get());
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  const bool has_sum = has_attribute(dset.get(), kChecksumAttribute);
  const uint64_t stored = has_sum ? read_attribute_uint64(dset.get(), kChecksumAttribute) : 0;
  char text[96];
  std::snprintf(text, sizeof text, "%-14s %-18s", shape_text(dims).c_str(),
                has_sum ? hex_text(stored).c_str() : "(none)");
  std::string out = text;
  if (!has_sum) bad = true;
  if (!verify) return out;
  std::vector<float> data(n);
  H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  const uint64_t computed = checksum(data.data(), 0, n);
  if (has_sum && computed == stored) return out + " OK";
  bad = true;
  return out + " MISMATCH (computed " + hex_text(computed) + ")";
}

}  // namespace

int inspect_checkpoint(const std::string& path, bool verify, std::ostream& out, std::ostream& err) {
  std::string file_path;
  H5Handle file;
  try {
    file_path = find_file(path);
    file = open_file(file_path);
  } catch (const std::exception& e) {
    err << "ckpt-inspect: no readable checkpoint at '" << path << "': " << e.what() << "\n";
    return 2;
  }
  bool bad = false;
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
  } catch (const std::exception& e) {
    bad = true;
    out << "manifest: BAD: " << e.what() << "\n";
  }
  const std::vector<std::string> names = tensor_names(file.get(), m);
  size_t width = 8;
  for (const std::string& n : names) width = std::max(width, n.size() + 9);
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
    for (const std::string& name : names) {
      const std::string dset = dataset_path(group, name);
      std::string text;
      try {
        text = row(file.get(), dset, verify, bad);
      } catch (const std::exception& e) {
        bad = true;
        text = std::string("UNREADABLE: ") + e.what();
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
