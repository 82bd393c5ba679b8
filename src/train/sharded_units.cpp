#include "mpitrain/train/sharded_units.hpp"

#include <algorithm>
#include <string>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/owned_copy.hpp"

namespace mpitrain {

namespace {

bool outer_unit(const ParamLayout& layout, int u) {  // not a block
  const size_t lo = layout.units()[u].lo;
  for (const ParamTensor& t : layout.tensors())
    if (t.offset == lo) return t.layer < 0;
  MPITRAIN_THROW("unit " + std::to_string(u) + " starts at no tensor");
}

}  // namespace

ShardedUnits::ShardedUnits(Backend<float>& backend, const ParamLayout& layout, Communicator& shard,
                           Communicator* replicas, Precision storage,
                           const ShardingOptions& options, Buf<float> whole_params)
    : backend_(backend),
      layout_(layout),
      shard_(shard),
      replicas_(replicas && replicas->size() > 1 ? replicas : nullptr),
      storage_(storage),
      opt_(options),
      whole_params_(whole_params) {
  if (opt_.level != 2 && opt_.level != 3)
    MPITRAIN_THROW("ShardedUnits is ZeRO-2 or ZeRO-3, not " + std::to_string(opt_.level));
  if ((opt_.level == 2) != static_cast<bool>(whole_params_))
    MPITRAIN_THROW("ZeRO-2 takes the model's whole parameters, ZeRO-3 none");
  if (opt_.expert_dp && replicas_)
    MPITRAIN_THROW("ShardedUnits: expert ranges with hybrid sharding's replicas");
  const std::vector<FlatRange> experts =
      opt_.expert_dp ? opt_.expert_ranges : std::vector<FlatRange>{};
  const int dense_ranks = shard_.size();
  const int expert_ranks = opt_.expert_dp ? opt_.expert_dp->size() : 1;
  // ZeRO-2: every rank's owned ranges (zero_owned) per group: dense_owned[r] for shard rank r,
  // expert_owned[q] for expert-dp rank q.
  std::vector<ShardRanges> dense_owned, expert_owned;
  if (opt_.level == 2) {
    for (int r = 0; r < dense_ranks; ++r)
      dense_owned.emplace_back(zero_owned(layout_.total(), experts, dense_ranks, r, expert_ranks, 0));
    for (int q = 0; q < expert_ranks; ++q)
      expert_owned.emplace_back(zero_owned(layout_.total(), experts, dense_ranks, 0, expert_ranks, q));
  }
  const std::vector<FlatRange>& units = layout_.units();
  std::vector<FlatRange> pieces;
  size_t at = 0, largest_block = 0;
  units_.resize(units.size());
  for (size_t u = 0; u < units.size(); ++u) {
    // The unit cut at the expert ranges' edges: dense segments over the shard group, expert ones
    // over expert-dp.
    for (const auto& [span, expert] : cut_at_experts(units[u], experts)) {
      Segment seg;
      seg.expert = expert;
      seg.span = {span.lo - units[u].lo, span.hi - units[u].lo};
      seg.blocks_at = blocks_.size();
      Communicator& group = expert ? *opt_.expert_dp : shard_;
      // Rank r's piece of the segment, relative to the unit: ZeRO-3 its zero_range of the
      // segment, ZeRO-2 the segment's part of the rank's owned ranges.
      for (int r = 0; r < group.size(); ++r) {
        FlatRange p;
        if (opt_.level == 3) {
          const FlatRange z = zero_range(span.size(), group.size(), r);
          p = {seg.span.lo + z.lo, seg.span.lo + z.hi};
        } else {
          const ShardRanges::Overlap o =
              (expert ? expert_owned[r] : dense_owned[r]).overlap(span.lo, span.hi);
          p = o.size() > 0 ? FlatRange{o.begin - units[u].lo, o.end - units[u].lo}
                           : FlatRange{seg.span.lo, seg.span.lo};
        }
        blocks_.push_back(p.size());
        if (r == group.rank()) seg.piece = p;
      }
      seg.at = at;
      at += seg.piece.size();
      pieces.push_back({units[u].lo + seg.piece.lo, units[u].lo + seg.piece.hi});
      units_[u].segments.push_back(seg);
    }
    units_[u].added = added_gradient_ranges(layout_, units[u]);
    if (!outer_unit(layout_, static_cast<int>(u)))
      largest_block = std::max(largest_block, units[u].size());
  }
  owned_ = ShardRanges(pieces);

  auto alloc = [&](size_t n, Precision dtype) {
    const Buf<float> b = backend_.alloc(n, dtype);
    allocations_.push_back(b.data());
    bytes_ += n * element_bytes<float>(dtype);
    return b;
  };
  // ZeRO-3 keeps its pieces in a buffer of their own; ZeRO-2's lie back to back in the model's
  // whole copy, where the optimizer updates them.
  backend_.set_alloc_kind(AllocKind::Params);
  const size_t first = owned_.ranges().empty() ? 0 : owned_.ranges().front().lo;
  compact_params_ = opt_.level == 3 || !contiguous(owned_);
  param_shard_ = compact_params_ ? alloc(owned_.size(), storage_) : whole_params_ + first;
  backend_.set_alloc_kind(AllocKind::Grads);
  grad_shard_ = alloc(owned_.size(), Precision::Fp32).full();
  // Unit buffers: one per outer unit; the blocks take turns in two (gradients, and gathered
  // parameters with prefetch) or one (gathered parameters without).
  const int block_turns = 2;
  for (int turn = 0; turn < block_turns; ++turn)
    grad_buffers_.push_back({alloc(largest_block, Precision::Fp32)});
  const bool whole_stage = opt_.level == 3 && !opt_.reshard_after_forward;
  const int param_turns = opt_.prefetch ? 2 : 1;
  backend_.set_alloc_kind(AllocKind::Params);
  Buf<float> stage_copy = whole_stage ? alloc(layout_.total(), storage_) : nullptr;
  if (opt_.level == 3 && !whole_stage)
    for (int turn = 0; turn < param_turns; ++turn)
      param_buffers_.push_back({alloc(largest_block, storage_)});
  int block = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    Unit& unit = units_[u];
    if (outer_unit(layout_, static_cast<int>(u))) {
      backend_.set_alloc_kind(AllocKind::Grads);
      unit.grad_buffer = static_cast<int>(grad_buffers_.size());
      grad_buffers_.push_back({alloc(units[u].size(), Precision::Fp32)});
      if (opt_.level == 3 && !whole_stage) {
        backend_.set_alloc_kind(AllocKind::Params);
        unit.param_buffer = static_cast<int>(param_buffers_.size());
        param_buffers_.push_back({alloc(units[u].size(), storage_)});
      }
    } else {
      unit.grad_buffer = block % block_turns;
      if (opt_.level == 3 && !whole_stage) unit.param_buffer = block % param_turns;
      ++block;
    }
    if (whole_stage) {  // every unit at its own place in the stage's copy
      unit.param_buffer = static_cast<int>(param_buffers_.size());
      param_buffers_.push_back({stage_copy + units[u].lo});
    }
  }
  backend_.set_alloc_kind(AllocKind::Activations);

  // The passes' orders of taking parameters (model.hpp); the embedding's backward needs none.
  const ModelShard& s = layout_.shard();
  const auto unit_of = [&](Slot slot, int layer) { return layout_.unit_of(slot, layer); };
  std::vector<int> blocks_up;
  for (int l = s.layer_begin; l < s.layer_end; ++l) blocks_up.push_back(unit_of(Slot::Ln1W, l));
  std::vector<int> head;
  if (s.last_stage) head = {unit_of(Slot::LnfW, -1), unit_of(layout_.head_slot(), -1)};
  if (s.first_stage) {
    order_[0].push_back(unit_of(Slot::Wte, -1));
    if (layout_.has(Slot::Wpe)) order_[0].push_back(unit_of(Slot::Wpe, -1));
  }
  order_[0].insert(order_[0].end(), blocks_up.begin(), blocks_up.end());
  order_[0].insert(order_[0].end(), head.begin(), head.end());
  order_[1] = head;
  order_[1].insert(order_[1].end(), blocks_up.rbegin(), blocks_up.rend());
}

ShardedUnits::~ShardedUnits() {
  for (Unit& u : units_) {  // nothing may be in flight into memory about to be freed
    if (u.gathering) wait_gathers(u);
    if (u.reducing) wait_reduces(u);
  }
  for (void* p : allocations_) backend_.free(p);
}

Communicator& ShardedUnits::group(const Segment& seg) const {
  return seg.expert ? *opt_.expert_dp : shard_;
}

std::span<const size_t> ShardedUnits::blocks(const Segment& seg) const {
  return {blocks_.data() + seg.blocks_at, static_cast<size_t>(group(seg).size())};
}

void ShardedUnits::wait_gathers(Unit& unit) {
  for (Segment& seg : unit.segments) group(seg).wait(seg.gather);
}

void ShardedUnits::wait_reduces(Unit& unit) {
  for (Segment& seg : unit.segments) group(seg).wait(seg.reduce);
}

void ShardedUnits::progress() {
  shard_.progress();
  if (opt_.expert_dp) opt_.expert_dp->progress();
}

void ShardedUnits::take_params() {
  if (opt_.level == 2 && compact_params_) take_owned(backend_, param_shard_, whole_params_, owned_);
}

void ShardedUnits::set_tensor(const ParamTensor& t, const float* local) {
  const ShardRanges::Overlap o = owned_.overlap(t.offset, t.offset + t.numel);
  if (o.size() > 0) backend_.upload(param_shard_ + o.at, local + (o.begin - t.offset), o.size());
  units_[t.unit].gathered = false;
}

std::vector<float> ShardedUnits::gather_whole(Communicator& host_shard,
                                              Communicator* host_experts) {
  std::vector<float> whole(layout_.total());
  std::vector<std::pair<Communicator*, CommHandle>> handles;
  for (size_t u = 0; u < units_.size(); ++u)
    for (const Segment& seg : units_[u].segments) {
      float* unit = whole.data() + layout_.units()[u].lo;
      backend_.download(unit + seg.piece.lo, param_shard_ + seg.at, seg.piece.size());
      Communicator* host = seg.expert ? host_experts : &host_shard;
      if (!host) MPITRAIN_THROW("gather_whole: expert segments need the expert-dp group");
      handles.push_back({host, host->all_gather_start(unit + seg.span.lo, blocks(seg))});
    }
  for (auto [host, h] : handles) host->wait(h);
  return whole;
}

// ---- parameters (ZeRO-3) ------------------------------------------------------------------

void ShardedUnits::gather_start(Buf<float> unit, Unit& u) {
  for (Segment& seg : u.segments) {
    const Buf<float> span = unit + seg.span.lo;
    seg.gather = span.full() ? group(seg).all_gather_start(span.full(), blocks(seg))
                             : group(seg).all_gather_start(span.half(), blocks(seg));
  }
}

void ShardedUnits::start_gather(int u) {
  Unit& unit = units_[u];
  Buffer& b = param_buffers_[unit.param_buffer];
  if (b.holder != -1 && b.holder != u)
    MPITRAIN_THROW("unit " + std::to_string(u) + ": its buffer still holds unit " +
                   std::to_string(b.holder));
  b.holder = u;
  for (const Segment& seg : unit.segments)
    backend_.copy(b.data + seg.piece.lo, param_shard_ + seg.at, seg.piece.size());
  gather_start(b.data, unit);
  unit.gathering = true;
}

void ShardedUnits::prefetch_after(int u, bool backward) {
  const std::vector<int>& order = order_[backward];
  size_t& at = cursor_[backward];
  // u is normally where the pass stands; a new pass (or the tied wte's second take) starts over.
  auto it =
      std::find(order.begin() + static_cast<long>(std::min(at, order.size())), order.end(), u);
  if (it == order.end()) it = std::find(order.begin(), order.end(), u);
  at = it == order.end() ? 0 : static_cast<size_t>(it - order.begin()) + 1;
  if (!opt_.prefetch || at >= order.size()) return;
  const int next = order[at];
  const Unit& n = units_[next];
  if (!n.gathered && !n.gathering && param_buffers_[n.param_buffer].holder == -1)
    start_gather(next);
}

CBuf<float> ShardedUnits::params(int u, bool backward) {
  if (opt_.level == 2) return CBuf<float>(whole_params_) + layout_.units()[u].lo;
  Unit& unit = units_[u];
  if (!unit.gathered && !unit.gathering) start_gather(u);
  if (unit.gathering) {
    wait_gathers(unit);
    unit.gathering = false;
    unit.gathered = true;
  }
  prefetch_after(u, backward);
  progress();
  return param_buffers_[unit.param_buffer].data;
}

void ShardedUnits::params_done(int u, bool /*backward*/) {
  if (opt_.level == 2 || !opt_.reshard_after_forward) return;  // kept until params_updated
  units_[u].gathered = false;
  param_buffers_[units_[u].param_buffer].holder = -1;
}

void ShardedUnits::params_updated() {
  if (opt_.level == 3) {  // the gathered copies are stale
    for (Unit& unit : units_) {
      if (unit.gathering) wait_gathers(unit);  // a prefetch no pass took
      unit.gathering = unit.gathered = false;
    }
    for (Buffer& b : param_buffers_) b.holder = -1;
    return;
  }
  // ZeRO-2: every rank's pieces, in place in the whole copy (a compact copy's first put there).
  if (compact_params_) put_owned(backend_, whole_params_, param_shard_, owned_);
  for (size_t u = 0; u < units_.size(); ++u)
    gather_start(whole_params_ + layout_.units()[u].lo, units_[u]);
  for (Unit& unit : units_) wait_gathers(unit);
}

// ---- gradients ------------------------------------------------------------------------------

void ShardedUnits::zero_grads() { backend_.zero(grad_shard_, owned_.size()); }

float* ShardedUnits::grads(int u) {
  Buffer& b = grad_buffers_[units_[u].grad_buffer];
  if (b.holder != -1) fold(b.holder);
  b.holder = u;
  for (const FlatRange& r : units_[u].added) backend_.zero(b.data + r.lo, r.size());
  return b.data.full();
}

void ShardedUnits::grads_done(int u) {
  Unit& unit = units_[u];
  float* g = grad_buffers_[unit.grad_buffer].data.full();
  for (Segment& seg : unit.segments)
    seg.reduce = group(seg).reduce_scatter_start(g + seg.span.lo, blocks(seg), ReduceOp::Sum);
  unit.reducing = true;
  progress();
}

void ShardedUnits::fold(int u) {
  Unit& unit = units_[u];
  Buffer& b = grad_buffers_[unit.grad_buffer];
  if (unit.reducing) {
    wait_reduces(unit);
    unit.reducing = false;
    for (const Segment& seg : unit.segments) {
      float* sum = grad_shard_ + seg.at;
      backend_.add(sum, sum, b.data + seg.piece.lo, seg.piece.size());
    }
  }
  b.holder = -1;
}

void ShardedUnits::finish() {
  for (size_t u = 0; u < units_.size(); ++u)
    if (units_[u].reducing) fold(static_cast<int>(u));
  if (replicas_)  // piece by piece: no call larger than a unit
    for (const Unit& unit : units_)
      for (const Segment& seg : unit.segments)
        if (seg.piece.size() > 0)
          replicas_->all_reduce(grad_shard_ + seg.at, seg.piece.size(), ReduceOp::Sum);
}

}  // namespace mpitrain
