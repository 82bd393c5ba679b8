// Where a rank's part of a tensor lies in its buffers and in the full tensor: parts, hyperslabs,
// agreement.
#include <algorithm>

#include "ckpt_io.hpp"
#include "mpitrain/runtime/agree.hpp"

namespace mpitrain {

namespace {

// For each tensor of the whole model (by global_index), this rank's copy of it or nullptr.
std::vector<const ParamTensor*> held_tensors(const ParamLayout& full, const ParamLayout& local) {
  std::vector<const ParamTensor*> held(full.tensors().size(), nullptr);
  for (const ParamTensor& t : local.tensors()) {
    const ParamTensor*& slot = held.at(t.global_index);
    if (slot) MPITRAIN_THROW("the layout holds tensor " + t.name + " twice");
    slot = &t;
  }
  return held;
}

// Calls box(start, count) for blocks that together hold the elements [a, b) (row-major indices)
// of an array of shape dims[d..]; start and count [0, d) are set by the caller. At most 2 per
// dimension: a partial first row, the whole rows, a partial last row.
template <class F>
void linear_boxes(const std::vector<uint64_t>& dims, size_t d, uint64_t a, uint64_t b,
                  std::vector<uint64_t>& start, std::vector<uint64_t>& count, const F& box) {
  if (a >= b) return;
  uint64_t inner = 1;  // elements per index of dimension d
  for (size_t k = d + 1; k < dims.size(); ++k) inner *= dims[k];
  uint64_t row = a / inner;
  const uint64_t last = b / inner;
  if (row == last) {  // within one row
    start[d] = row, count[d] = 1;
    return linear_boxes(dims, d + 1, a - row * inner, b - row * inner, start, count, box);
  }
  if (a % inner != 0) {
    start[d] = row, count[d] = 1;
    linear_boxes(dims, d + 1, a % inner, inner, start, count, box);
    ++row;
  }
  if (last > row) {
    start[d] = row, count[d] = last - row;
    for (size_t k = d + 1; k < dims.size(); ++k) start[k] = 0, count[k] = dims[k];
    box(start, count);
  }
  if (b % inner != 0) {
    start[d] = last, count[d] = 1;
    linear_boxes(dims, d + 1, 0, b % inner, start, count, box);
  }
}

TensorPart part_of(const ParamTensor& t, const ShardRanges& ranges) {
  const ShardRanges::Overlap o = ranges.overlap(t.offset, t.offset + t.numel);
  if (o.size() == 0) return {};
  return {o.begin - t.offset, o.end - t.offset, o.at};
}

}  // namespace

std::vector<TensorParts> tensor_parts(const ParamLayout& full, const CheckpointState& s) {
  const size_t n_state = state_names(s.optimizer).size();
  if (s.state.size() != n_state)
    MPITRAIN_THROW("optimizer " + to_string(s.optimizer) + " has " + std::to_string(n_state) +
                   " state buffers, not " + std::to_string(s.state.size()));
  for (const ShardRanges* r : {&s.params_held, &s.owned})
    if (!r->ranges().empty() && r->ranges().back().hi > s.layout.total())
      MPITRAIN_THROW("shard range ending at " + std::to_string(r->ranges().back().hi) +
                     " is not inside the " + std::to_string(s.layout.total()) + " parameters");
  const std::vector<const ParamTensor*> held = held_tensors(full, s.layout);
  std::vector<TensorParts> parts(held.size());
  for (size_t k = 0; k < held.size(); ++k) {
    if (!held[k]) continue;
    const ParamTensor& t = *held[k];
    parts[k] = {&t, part_of(t, s.params_held), part_of(t, s.owned)};
    const TensorPart &h = parts[k].held, &o = parts[k].owned;
    if (o.a < o.b && (o.a < h.a || o.b > h.b))
      MPITRAIN_THROW("tensor " + t.name +
                     ": the optimizer owns elements that params does not hold");
  }
  return parts;
}

Selection select_range(const ParamTensor& whole, const ParamTensor* t, uint64_t a, uint64_t b) {
  const std::vector<hsize_t> full(whole.global_shape.begin(), whole.global_shape.end());
  Selection s{
      H5Handle(H5_CHECK(H5Screate_simple(static_cast<int>(full.size()), full.data(), nullptr))),
      {}};
  H5_CHECK(H5Sselect_none(s.file.get()));
  if (!t || a >= b) {  // an empty selection of an (arbitrary) one-element memory space
    const hsize_t one = 1;
    s.memory = H5Handle(H5_CHECK(H5Screate_simple(1, &one, nullptr)));
    H5_CHECK(H5Sselect_none(s.memory.get()));
    return s;
  }
  if (b > t->numel) MPITRAIN_THROW("tensor " + t->name + ": elements beyond its end");
  const hsize_t n = b - a;
  s.memory = H5Handle(H5_CHECK(H5Screate_simple(1, &n, nullptr)));  // all selected
  // HDF5 pairs the selected elements of both sides in row-major order: local order must be
  // global order, so the pieces must come in the same order along the split dimension.
  for (size_t i = 1; i < t->pieces.size(); ++i)
    if (t->pieces[i].global_start <= t->pieces[i - 1].global_start ||
        t->pieces[i].local_start <= t->pieces[i - 1].local_start)
      MPITRAIN_THROW("tensor " + t->name + ": pieces out of order");
  // The local boxes of [a, b), each cut by the pieces and moved to its place in the full tensor.
  const std::vector<uint64_t> local(t->shape.begin(), t->shape.end());
  std::vector<uint64_t> start(local.size()), count(local.size());
  const int sd = t->split_dim;
  linear_boxes(local, 0, a, b, start, count,
               [&](const std::vector<uint64_t>& box_start, const std::vector<uint64_t>& box_count) {
                 if (sd < 0) return select_block(s.file.get(), box_start, box_count);
                 const uint64_t lo = box_start[sd], hi = lo + box_count[sd];
                 for (const ShardPiece& p : t->pieces) {
                   const uint64_t from = std::max<uint64_t>(lo, p.local_start);
                   const uint64_t to = std::min<uint64_t>(hi, p.local_start + p.length);
                   if (from >= to) continue;
                   std::vector<uint64_t> g = box_start, c = box_count;
                   g[sd] = p.global_start + (from - p.local_start);
                   c[sd] = to - from;
                   select_block(s.file.get(), g, c);
                 }
               });
  // Checked here, before any collective call, rather than by HDF5 inside one.
  if (H5_CHECK(H5Sselect_valid(s.file.get())) <= 0 ||
      H5_CHECK(H5Sget_select_npoints(s.file.get())) != static_cast<hssize_t>(n))
    MPITRAIN_THROW("tensor " + t->name + ": its pieces do not fit its shapes");
  return s;
}

void agree_on(const MpiComm& world, const std::string& what, const std::function<void()>& step) {
  all_or_none(world, [&] {
    try {
      step();
    } catch (const std::exception& e) {
      throw Error(what + ": " + e.what());
    }
  });
}

}  // namespace mpitrain
