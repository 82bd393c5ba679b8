#include "mpitrain/train/replica_check.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mpitrain/train/numeric_guard.hpp"

namespace mpitrain {

namespace {

// One replica's view of the differing tensor, gathered on dp rank 0 (fixed size, as bytes).
struct Version {
  int32_t world_rank;
  uint64_t hash, count, nan, inf;
  double min, max, mean, std;
  uint64_t differing;     // elements whose bits differ from dp rank 0's copy
  int64_t first_diff;     // the first of them, -1 if none
  float mine, reference;  // the values there
  double max_abs_diff;
};

Version version_of(const ParamTensor& t, const float* data, const float* reference, int rank) {
  const TensorStats s = tensor_stats(data, t.shape);
  Version v{};
  v.world_rank = rank;
  v.hash = tensor_hash(data, t.numel);
  v.count = s.count, v.nan = s.nan, v.inf = s.inf;
  v.min = s.min, v.max = s.max, v.mean = s.mean, v.std = s.std;
  v.first_diff = -1;
  for (size_t i = 0; i < t.numel; ++i) {
    if (std::bit_cast<uint32_t>(data[i]) == std::bit_cast<uint32_t>(reference[i])) continue;
    if (v.differing++ == 0)
      v.first_diff = static_cast<int64_t>(i), v.mine = data[i], v.reference = reference[i];
    v.max_abs_diff =
        std::max(v.max_abs_diff, std::fabs(static_cast<double>(data[i]) - reference[i]));
  }
  return v;
}

std::string mismatch_text(const ParamTensor& t, const std::vector<Version>& versions,
                          int64_t step) {
  // Each distinct hash with the ranks that hold it, in order of first appearance (the reporter's
  // copy first).
  std::vector<std::pair<uint64_t, std::vector<int>>> holders;
  for (const Version& v : versions) {
    auto it = std::find_if(holders.begin(), holders.end(),
                           [&](const auto& h) { return h.first == v.hash; });
    if (it == holders.end()) it = holders.insert(holders.end(), {v.hash, {}});
    it->second.push_back(v.world_rank);
  }
  std::string shape;
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (i > 0) shape += ", ";
    shape += std::to_string(t.shape[i]);
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "trainer: step %lld: replica drift: the data-parallel copies of %s (global tensor "
                "%d, shape [%s] f32) differ: %zu versions over %zu replicas\n",
                static_cast<long long>(step), t.name.c_str(), t.global_index, shape.c_str(),
                holders.size(), versions.size());
  std::string text = line;
  int number = 0;
  for (auto& [hash, ranks] : holders) {
    std::sort(ranks.begin(), ranks.end());
    const Version& v = *std::find_if(versions.begin(), versions.end(),
                                     [&](const Version& x) { return x.hash == hash; });
    const std::string list = rank_ranges(ranks);
    std::snprintf(line, sizeof line,
                  "trainer:   version %d on world rank(s) %s: hash %016llx, %llu NaN, %llu inf of "
                  "%llu; finite min %.9g max %.9g mean %.9g std %.9g",
                  ++number, list.c_str(), static_cast<unsigned long long>(hash),
                  static_cast<unsigned long long>(v.nan), static_cast<unsigned long long>(v.inf),
                  static_cast<unsigned long long>(v.count), v.min, v.max, v.mean, v.std);
    text += line;
    if (v.differing > 0) {
      std::snprintf(line, sizeof line,
                    "; differs from rank %d's copy in %llu element(s), first at index %lld (%.9g "
                    "vs %.9g), max |diff| %.3g",
                    versions[0].world_rank, static_cast<unsigned long long>(v.differing),
                    static_cast<long long>(v.first_diff), v.mine, v.reference, v.max_abs_diff);
      text += line;
    }
    text += "\n";
  }
  return text +
         "trainer: stopping: data-parallel replicas must hold identical parameters (a "
         "memory or hardware fault, or a rank that computed something else)\n";
}

}  // namespace

uint64_t tensor_hash(const float* data, size_t n) {
  // FNV-1a over the 32-bit words: each step is a bijection of the state for a given word and
  // injective in the word for a given state, so one changed value always changes the result.
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= std::bit_cast<uint32_t>(data[i]);
    h *= 0x100000001b3ull;
  }
  return h;
}

bool replicas_agree(const ParamLayout& layout, const float* params, MpiCommunicator& dp,
                    MpiCommunicator& world, int64_t step) {
  const std::vector<ParamTensor>& tensors = layout.tensors();
  const int n = static_cast<int>(tensors.size());
  std::vector<int64_t> lo(n), hi(n);
#pragma omp parallel for schedule(dynamic)
  for (int i = 0; i < n; ++i)
    lo[i] = hi[i] =
        std::bit_cast<int64_t>(tensor_hash(params + tensors[i].offset, tensors[i].numel));
  dp.all_reduce(lo.data(), n, ReduceOp::Min);
  dp.all_reduce(hi.data(), n, ReduceOp::Max);
  int first = -1;  // this group's first differing tensor
  for (int i = 0; i < n && first < 0; ++i)
    if (lo[i] != hi[i]) first = i;
  int64_t agreed[1] = {first >= 0 ? tensors[first].global_index : INT64_MAX};
  world.all_reduce(agreed, 1, ReduceOp::Min);
  if (agreed[0] == INT64_MAX) return true;

  // The reporting group: of the groups whose first differing tensor is the agreed one, the one
  // with the lowest world rank (its dp rank 0).
  int64_t reporter =
      first >= 0 && tensors[first].global_index == agreed[0] ? world.rank() : INT64_MAX;
  world.all_reduce(&reporter, 1, ReduceOp::Min);
  const std::vector<int>& group = dp.calls().world_ranks();
  const auto at = std::find(group.begin(), group.end(), static_cast<int>(reporter));
  std::string text;
  if (at != group.end()) {  // this rank's group reports; the reporter's copy is the reference
    const int root = static_cast<int>(at - group.begin());
    const ParamTensor& t = tensors[first];
    std::vector<float> reference(params + t.offset, params + t.offset + t.numel);
    dp.broadcast(reference.data(), reference.size() * sizeof(float), root);
    const Version mine = version_of(t, params + t.offset, reference.data(), world.rank());
    std::vector<Version> versions(dp.rank() == root ? dp.size() : 0);
    MPI_CHECK(MPI_Gather(&mine, sizeof mine, MPI_BYTE, versions.data(), sizeof mine, MPI_BYTE, root,
                         dp.mpi()));
    if (dp.rank() == root) {
      std::rotate(versions.begin(), versions.begin() + root, versions.end());  // reporter first
      text = mismatch_text(t, versions, step);
    }
  }
  // The reporter's text to rank 0, which prints it.
  int64_t length = static_cast<int64_t>(text.size());
  world.broadcast(&length, sizeof length, static_cast<int>(reporter));
  text.resize(length);
  world.broadcast(text.data(), text.size(), static_cast<int>(reporter));
  if (world.rank() == 0) {
    std::fputs(text.c_str(), stderr);
    std::fflush(stderr);
  }
  return false;
}

void apply_drift_fault(const FaultPlan& faults, const ParamLayout& layout, Buf<float> params,
                       int world_rank, int64_t step) {
  if (!faults.fires(FaultKind::Drift, world_rank, step) || layout.tensors().empty()) return;
  const ParamTensor& t = layout.tensors()[layout.tensors().size() / 2];
  if (float* full = params.full()) {
    float& x = full[t.offset];
    x = std::nextafter(x, x < 0 ? -INFINITY : INFINITY);
  } else {
    ++params.half()[t.offset];  // sign and magnitude: one 2-byte ulp away from zero
  }
  std::fprintf(stderr, "fault injection: rank %d moves %s[0] by one ulp after step %lld\n",
               world_rank, t.name.c_str(), static_cast<long long>(step));
}

}  // namespace mpitrain
