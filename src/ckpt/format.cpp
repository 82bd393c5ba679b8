// Names and the dataset checksum of the checkpoint format (the manifest: manifest.cpp).
#include "mpitrain/ckpt/format.hpp"

#include <algorithm>
#include <bit>
#include <cinttypes>
#include <cstdio>

#include "ckpt_io.hpp"
#include "mpitrain/io/hdf5.hpp"

namespace mpitrain {

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return name;
}

std::optional<int64_t> parse_step_dir(const std::string& name) {
  const std::string prefix = "step-";
  const size_t digits = name.size() - prefix.size();
  if (name.size() <= prefix.size() || digits > 18 || name.compare(0, prefix.size(), prefix) != 0)
    return std::nullopt;
  int64_t step = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::string hex_text(uint64_t x) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%016" PRIx64, x);
  return buf;
}

std::string dataset_path(const std::string& group, const std::string& tensor) {
  return "/" + group + "/" + tensor;
}

std::vector<std::string> checkpoint_groups(OptimizerKind optimizer) {
  std::vector<std::string> groups = {kParamsGroup};
  for (const std::string& name : state_names(optimizer)) groups.push_back(name);
  return groups;
}

// ---- checksum -------------------------------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t checksum(const float* data, uint64_t first_index, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t k = 0; k < n; ++k)
    sum += splitmix64(((first_index + k) << 32) | std::bit_cast<uint32_t>(data[k]));
  return sum;
}

uint64_t range_checksum(const ParamTensor& t, const float* data, uint64_t a, uint64_t b) {
  uint64_t sum = 0;
  for_each_run(t, [&](uint64_t global, uint64_t local, uint64_t n) {
    const uint64_t begin = std::max(a, local), end = std::min(b, local + n);
    if (begin < end) sum += checksum(data + (begin - a), global + (begin - local), end - begin);
  });
  return sum;
}

}  // namespace mpitrain
