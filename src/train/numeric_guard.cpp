#include "mpitrain/train/numeric_guard.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>

#include "mpitrain/monitor/json_number.hpp"
#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

bool finite_bits(uint32_t u) { return (u & 0x7f800000u) != 0x7f800000u; }

// True if all n values are finite; a branch-free pass the compiler vectorises.
bool all_finite(const float* x, size_t n) {
  uint32_t bad = 0;
#pragma omp parallel for reduction(| : bad) schedule(static) if (n > (1u << 20))
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bad |= !finite_bits(u);
  }
  return bad == 0;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// What the owner of the first non-finite tensor tells everyone (fixed size, broadcast as bytes).
struct FirstTensor {
  char name[96];
  int32_t layer, ndim;
  int64_t shape[4];
  uint64_t begin, count, nan, inf;
  double min, max, mean, std;
};

// The held elements of tensor p: flat [begin, end) at compact `at` (empty: begin == end).
using Part = ShardRanges::Overlap;
Part part_of(const ParamTensor& p, const ShardRanges& held) {
  return held.overlap(p.offset, p.offset + p.numel);
}

TensorStats part_stats(const ParamTensor& p, const float* grads, Part part) {
  return tensor_stats(grads + part.at, p.shape, part.begin - p.offset, part.size());
}

// JSON objects (comma-separated) for this rank's non-finite tensors (held part) and loss.
std::string local_findings(const ParamLayout& layout, const float* grads, const ShardRanges& held,
                           double loss, int rank) {
  std::string out;
  auto add = [&](const std::string& object) {
    if (!out.empty()) out += ",\n  ";
    out += object;
  };
  if (!std::isfinite(loss))
    add("{\"rank\": " + std::to_string(rank) + ", \"loss\": \"" + number(loss) + "\"}");
  for (const ParamTensor& p : layout.tensors()) {
    const Part part = part_of(p, held);
    if (all_finite(grads + part.at, part.size())) continue;
    add("{\"rank\": " + std::to_string(rank) + ", \"tensor\": \"" + p.name + "\", \"layer\": " +
        std::to_string(p.layer) + ", \"global_shape\": " + shape_text(p.global_shape) + ", " +
        json_members(part_stats(p, grads, part)) + "}");
  }
  return out;
}

}  // namespace

TensorStats tensor_stats(const float* data, const std::vector<int64_t>& shape) {
  uint64_t count = 1;
  for (int64_t d : shape) count *= static_cast<uint64_t>(d);
  return tensor_stats(data, shape, 0, count);
}

TensorStats tensor_stats(const float* data, const std::vector<int64_t>& shape, uint64_t begin,
                         uint64_t count) {
  TensorStats s;
  s.shape = shape;
  s.begin = begin;
  s.count = count;
  double sum = 0.0, lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (uint64_t i = 0; i < s.count; ++i) {
    const double x = data[i];
    if (std::isnan(x))
      ++s.nan;
    else if (std::isinf(x))
      ++s.inf;
    else
      sum += x, lo = std::min(lo, x), hi = std::max(hi, x);
  }
  const uint64_t finite = s.count - s.nan - s.inf;
  if (finite == 0) return s;
  s.min = lo;
  s.max = hi;
  s.mean = sum / static_cast<double>(finite);
  double sq = 0.0;  // second pass: squared deviations, exact enough in double
  for (uint64_t i = 0; i < s.count; ++i)
    if (std::isfinite(data[i])) sq += (data[i] - s.mean) * (data[i] - s.mean);
  s.std = std::sqrt(sq / static_cast<double>(finite));
  return s;
}

namespace {

bool whole(const TensorStats& s) {
  uint64_t n = 1;
  for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
  return s.begin == 0 && s.count == n;
}

}  // namespace

std::string describe(const TensorStats& s) {
  char part[64] = "";
  if (!whole(s))
    std::snprintf(part, sizeof part,
                  ", elements %llu-%llu:", static_cast<unsigned long long>(s.begin),
                  static_cast<unsigned long long>(s.begin + s.count - 1));
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "shape %s %s%s %llu NaN, %llu inf of %llu; finite min %.6g max %.6g mean %.6g "
                "std %.6g",
                shape_text(s.shape).c_str(), s.dtype, whole(s) ? "," : part,
                static_cast<unsigned long long>(s.nan), static_cast<unsigned long long>(s.inf),
                static_cast<unsigned long long>(s.count), s.min, s.max, s.mean, s.std);
  return buf;
}

std::string json_members(const TensorStats& s) {
  const bool any = s.count > s.nan + s.inf;
  auto value = [&](double x) { return any ? json_number(x) : std::string("null"); };
  const std::string elements = whole(s) ? ""
                                        : ", \"elements\": [" + std::to_string(s.begin) + ", " +
                                              std::to_string(s.begin + s.count) + "]";
  return "\"shape\": " + shape_text(s.shape) + ", \"dtype\": \"" + s.dtype + "\"" + elements +
         ", \"count\": " + std::to_string(s.count) + ", \"nan\": " + std::to_string(s.nan) +
         ", \"inf\": " + std::to_string(s.inf) + ", \"min\": " + value(s.min) +
         ", \"max\": " + value(s.max) + ", \"mean\": " + value(s.mean) +
         ", \"std\": " + value(s.std);
}

std::string NonFinite::describe() const {
  if (!found) return "all finite";
  std::string text = loss ? "non-finite loss" : "";
  if (rank >= 0)
    text += std::string(loss ? "; " : "") + "non-finite gradient: first in " + tensor +
            (layer >= 0 ? " (block " + std::to_string(layer) + ")" : "") + " on rank " +
            std::to_string(rank) + ": " + mpitrain::describe(stats);
  else
    text += " (every gradient finite)";
  return text;
}

NonFinite find_nonfinite(const ParamLayout& layout, const float* grads, double loss,
                         MpiCommunicator& world) {
  return find_nonfinite(layout, grads, ShardRanges::whole(layout.total()), loss, world);
}

NonFinite find_nonfinite(const ParamLayout& layout, const float* grads, const ShardRanges& held,
                         double loss, MpiCommunicator& world) {
  int64_t first = INT64_MAX;  // global index of this rank's first non-finite gradient tensor
  if (!all_finite(grads, held.size()))
    for (const ParamTensor& p : layout.tensors()) {
      const Part part = part_of(p, held);
      if (!all_finite(grads + part.at, part.size()))
        first = std::min<int64_t>(first, p.global_index);
    }
  int64_t agreed[2] = {first, std::isfinite(loss) ? 1 : 0};  // min over ranks of both
  world.all_reduce(agreed, 2, ReduceOp::Min);
  NonFinite r;
  r.held = held;
  r.loss = agreed[1] == 0;
  r.found = r.loss || agreed[0] != INT64_MAX;
  if (agreed[0] == INT64_MAX) return r;

  int64_t owner = first == agreed[0] ? world.rank() : INT64_MAX;
  world.all_reduce(&owner, 1, ReduceOp::Min);
  FirstTensor t{};
  if (owner == world.rank()) {
    for (const ParamTensor& p : layout.tensors()) {
      if (p.global_index != first) continue;
      const TensorStats s = part_stats(p, grads, part_of(p, held));
      std::snprintf(t.name, sizeof t.name, "%s", p.name.c_str());
      t.layer = p.layer;
      t.ndim = static_cast<int32_t>(std::min<size_t>(s.shape.size(), 4));
      std::copy(s.shape.begin(), s.shape.begin() + t.ndim, t.shape);
      t.begin = s.begin, t.count = s.count, t.nan = s.nan, t.inf = s.inf;
      t.min = s.min, t.max = s.max, t.mean = s.mean, t.std = s.std;
      break;
    }
  }
  world.broadcast(&t, sizeof t, static_cast<int>(owner));
  r.rank = static_cast<int>(owner);
  r.global_index = static_cast<int>(agreed[0]);
  r.layer = t.layer;
  r.tensor = t.name;
  r.stats.shape.assign(t.shape, t.shape + t.ndim);
  r.stats.begin = t.begin, r.stats.count = t.count, r.stats.nan = t.nan, r.stats.inf = t.inf;
  r.stats.min = t.min, r.stats.max = t.max, r.stats.mean = t.mean, r.stats.std = t.std;
  return r;
}

NanPolicy parse_nan_policy(const std::string& text) {
  if (text == "skip") return NanPolicy::Skip;
  if (text == "stop") return NanPolicy::Stop;
  throw UsageError("on-nan must be skip or stop, not '" + text + "'");
}

NumericGuard::NumericGuard(NanPolicy policy, std::string out_dir, MpiCommunicator& world)
    : policy_(policy), out_dir_(std::move(out_dir)), world_(world) {}

StepVerdict NumericGuard::check(const ParamLayout& layout, const float* grads, double loss,
                                int64_t step) {
  return apply(find_nonfinite(layout, grads, loss, world_), layout, grads, loss, step);
}

StepVerdict NumericGuard::apply(const NonFinite& finding, const ParamLayout& layout,
                                const float* grads, double loss, int64_t step) {
  if (!finding.found) return StepVerdict::Update;
  const bool root = world_.rank() == 0;
  if (policy_ == NanPolicy::Skip) {
    ++skipped_;
    if (root) {
      std::printf("step %lld: %s; update skipped (--on-nan skip, %lld skipped so far)\n",
                  static_cast<long long>(step), finding.describe().c_str(),
                  static_cast<long long>(skipped_));
      std::fflush(stdout);
    }
    return StepVerdict::Skip;
  }
  // Stop: every rank's findings to rank 0, which writes them.
  const std::string mine =
      local_findings(layout, grads, finding.held, loss, world_.rank());
  int length = static_cast<int>(mine.size());
  std::vector<int> lengths(root ? world_.size() : 0), displs(lengths.size());
  MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, world_.mpi()));
  for (size_t i = 1; i < displs.size(); ++i) displs[i] = displs[i - 1] + lengths[i - 1];
  std::string all(root ? displs.back() + lengths.back() : 0, '\0');
  MPI_CHECK(MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), displs.data(),
                        MPI_CHAR, 0, world_.mpi()));
  if (!root) return StepVerdict::Stop;
  const std::string path =
      (fs::path(out_dir_) / ("nonfinite-step-" + std::to_string(step) + ".json")).string();
  std::string objects;
  for (size_t i = 0; i < lengths.size(); ++i)
    if (lengths[i] > 0)
      objects.append(objects.empty() ? "" : ",\n  ").append(all, displs[i], lengths[i]);
  std::string first = "null";
  if (finding.rank >= 0)
    first = "{\"rank\": " + std::to_string(finding.rank) + ", \"tensor\": \"" + finding.tensor +
            "\", \"layer\": " + std::to_string(finding.layer) + ", " + json_members(finding.stats) +
            "}";
  std::FILE* f = std::fopen(path.c_str(), "w");
  bool written = f != nullptr;
  if (f) {
    written = std::fprintf(f,
                           "{\"step\": %lld, \"loss_nonfinite\": %s, \"first\": %s,\n"
                           " \"found\": [\n  %s\n]}\n",
                           static_cast<long long>(step), finding.loss ? "true" : "false",
                           first.c_str(), objects.c_str()) > 0;
    written = std::fclose(f) == 0 && written;
  }
  const std::string where =
      written ? "diagnostics in " + path : "could not write " + path + ": " + std::strerror(errno);
  std::fprintf(stderr, "trainer: step %lld: %s; stopping (--on-nan stop, exit %d); %s\n",
               static_cast<long long>(step), finding.describe().c_str(), kExitFailure,
               where.c_str());
  std::fflush(stderr);
  return StepVerdict::Stop;
}

void apply_nan_fault(const FaultPlan& faults, const ParamLayout& layout, float* grads,
                     const ShardRanges& held, int world_rank, int64_t step) {
  if (!faults.fires(FaultKind::Nan, world_rank, step) || !layout.has(Slot::ProjW, faults.layer()))
    return;
  const size_t at = layout.offset(Slot::ProjW, faults.layer());
  const ShardRanges::Overlap o = held.overlap(at, at + 1);
  if (o.size() == 0) return;  // another rank's shard
  grads[o.at] = std::numeric_limits<float>::quiet_NaN();
  std::fprintf(stderr,
               "fault injection: rank %d puts a NaN into h.%d.attn.proj.weight's "
               "gradient in step %lld\n",
               world_rank, faults.layer(), static_cast<long long>(step));
}

}  // namespace mpitrain
