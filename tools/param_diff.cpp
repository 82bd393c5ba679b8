// param-diff: compares the floating-point datasets of two HDF5 files tensor by tensor, in double
// precision: two `trainer --export-params` files, or two checkpoints' checkpoint.h5.
//
//   param-diff A.h5 B.h5 [--base P0.h5] [--max-rel X]
//
// For every dataset of A (any depth; B must hold the same names and shapes, and nothing more):
//   max |a - b|, ||a - b|| (2-norm), and the relative difference
//     with --base:    ||a - b|| / ||a - p0||   (the difference as a fraction of how far training
//                                              moved the tensor from the common start P0)
//     without:        ||a - b|| / ||a||
// Scale-aware on purpose: two runs that differ only in the order of fp32 sums drift apart by a
// small fraction of the distance trained, whatever the optimizer does to near-zero gradients
// (AdamW's m / sqrt(v) turns their noise into steps of size lr), while a wrong result (a missing
// tensor-parallel sum, say) moves a tensor somewhere else altogether: a ratio near 1.
// One table row per tensor, the largest relative difference last. Exit code: 0 every ratio
// <= X (default: no bound, report only), 1 a ratio above X or a NaN, names or shapes that differ,
// 2 bad usage or an unreadable file.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

using namespace mpitrain;

namespace {

constexpr const char* kUsage = "usage: param-diff A.h5 B.h5 [--base P0.h5] [--max-rel X]";

struct Args {
  std::string a, b, base;
  std::optional<double> max_rel;
};

Args parse(int argc, char** argv) {
  Args args;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--help" || arg == "-h") {
      std::printf("%s\n", kUsage);
      std::exit(kExitOk);
    } else if (arg == "--base" && has_value) {
      args.base = argv[++i];
    } else if (arg == "--max-rel" && has_value) {
      char* end = nullptr;
      const double x = std::strtod(argv[++i], &end);
      require(*end == '\0' && std::isfinite(x) && x >= 0,
              std::string("--max-rel '") + argv[i] + "' is not a finite number >= 0");
      args.max_rel = x;
    } else {
      require(arg.empty() || arg[0] != '-', "unexpected argument '" + arg + "'; " + kUsage);
      files.push_back(arg);
    }
  }
  require(files.size() == 2, std::string("two files to compare are needed; ") + kUsage);
  args.a = files[0];
  args.b = files[1];
  return args;
}

#if H5_VERSION_GE(1, 12, 0)
using ObjectInfo = H5O_info2_t;
#define MPITRAIN_H5OVISIT H5Ovisit3
#else
using ObjectInfo = H5O_info_t;
#define MPITRAIN_H5OVISIT H5Ovisit2
#endif

herr_t collect_dataset(hid_t, const char* name, const ObjectInfo* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}

// Every dataset of the file, by path (sorted: HDF5 visits by name).
std::vector<std::string> datasets(hid_t file) {
  std::vector<std::string> names;
  H5_CHECK(
      MPITRAIN_H5OVISIT(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &names, H5O_INFO_BASIC));
  return names;
}

H5Handle open(const std::string& path) {
  require(is_hdf5_file(path), "'" + path + "' is not an HDF5 file (or does not exist)");
  return open_file(path);
}

// The floating-point dataset at name, as doubles; shape its extent. UsageError naming the file
// where it is missing or not floating point.
std::vector<double> read_tensor(hid_t file, const std::string& name, std::vector<uint64_t>& shape) {
  require(has_link(file, name), file_name(file) + " has no dataset " + name);
  H5Handle dset = open_dataset(file, name);
  H5Handle type(H5_CHECK(H5Dget_type(dset.get())));
  require(H5_CHECK(H5Tget_class(type.get())) == H5T_FLOAT,
          file_name(file) + ": " + name + " is not a floating-point dataset");
  shape = dataset_dims(dset.get());
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  std::vector<double> values(n);
  if (n > 0)
    H5_CHECK(H5Dread(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
  return values;
}

struct Row {
  std::string name;
  uint64_t n = 0;
  double max_abs = 0, diff_norm = 0, scale_norm = 0, rel = 0;
};

// ||a - b||, max |a - b| and ||a - ref|| (ref: p0, or zero); rel = the first over the last (0 for
// two equal tensors, inf when they differ but the reference distance is 0; NaN stays NaN).
Row compare(const std::string& name, const std::vector<double>& a, const std::vector<double>& b,
            const std::vector<double>* p0) {
  Row r{name, a.size()};
  double diff2 = 0, scale2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = a[i] - b[i], s = a[i] - (p0 ? (*p0)[i] : 0.0);
    diff2 += d * d;
    scale2 += s * s;
    r.max_abs = std::isnan(d) ? d : std::max(r.max_abs, std::fabs(d));
  }
  r.diff_norm = std::sqrt(diff2);
  r.scale_norm = std::sqrt(scale2);
  r.rel = r.diff_norm == 0 ? (std::isnan(scale2) ? scale2 : 0.0)
                           : r.diff_norm / r.scale_norm;  // x / 0 = inf; NaN propagates
  return r;
}

int run(int argc, char** argv) {
  const Args args = parse(argc, argv);
  hdf5_silence_errors();
  H5Handle fa = open(args.a), fb = open(args.b);
  H5Handle fp0 = args.base.empty() ? H5Handle() : open(args.base);
  const std::vector<std::string> names = datasets(fa.get());
  require(!names.empty(), args.a + " holds no datasets");
  bool bad = false;
  for (const std::string& extra : datasets(fb.get()))
    if (!has_link(fa.get(), extra)) {
      std::printf("%s: only in %s\n", extra.c_str(), args.b.c_str());
      bad = true;
    }
  std::vector<Row> rows;
  for (const std::string& name : names) {
    std::vector<uint64_t> sa, sb, s0;
    const std::vector<double> a = read_tensor(fa.get(), name, sa);
    if (!has_link(fb.get(), name)) {
      std::printf("%s: only in %s\n", name.c_str(), args.a.c_str());
      bad = true;
      continue;
    }
    const std::vector<double> b = read_tensor(fb.get(), name, sb);
    std::vector<double> p0;
    if (fp0) p0 = read_tensor(fp0.get(), name, s0);
    if (sb != sa || (fp0 && s0 != sa)) {
      std::string base_shape;
      if (fp0) base_shape = ", " + shape_text(s0) + " in " + args.base;
      std::printf("%s: shapes differ: %s in %s, %s in %s%s\n", name.c_str(), shape_text(sa).c_str(),
                  args.a.c_str(), shape_text(sb).c_str(), args.b.c_str(), base_shape.c_str());
      bad = true;
      continue;
    }
    rows.push_back(compare(name, a, b, fp0 ? &p0 : nullptr));
  }
  std::sort(rows.begin(), rows.end(), [](const Row& x, const Row& y) {
    return std::isnan(y.rel) ? !std::isnan(x.rel) : x.rel < y.rel;  // NaN last
  });
  const char* scale = fp0 ? "||a-p0||" : "||a||";
  std::printf("%-28s %10s %12s %12s %12s %12s\n", "tensor", "elements", "max|a-b|", "||a-b||",
              scale, "relative");
  for (const Row& r : rows)
    std::printf("%-28s %10llu %12.3e %12.3e %12.3e %12.3e\n", r.name.c_str(),
                static_cast<unsigned long long>(r.n), r.max_abs, r.diff_norm, r.scale_norm, r.rel);
  if (rows.empty()) return kExitFailure;
  const Row& worst = rows.back();
  std::printf("largest relative difference: %.3e (%s)", worst.rel, worst.name.c_str());
  if (args.max_rel) {
    const bool over = !(worst.rel <= *args.max_rel);  // NaN is over
    std::printf(", bound %.3e: %s", *args.max_rel, over ? "EXCEEDED" : "within");
    bad = bad || over;
  }
  std::printf("\n");
  return bad ? kExitFailure : kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("param-diff", argc, argv, run); }
