#include "mpitrain/runtime/grid.hpp"

#include <algorithm>
#include <array>
#include <string>

namespace mpitrain {

namespace {

constexpr size_t kMostLayouts = 6;  // more alternatives would bury the message

// Rank counts the grid fits: any multiple of the fixed ranks while some entry is open.
std::string fitting_rank_counts(int known, bool open) {
  const std::string first = "-np " + std::to_string(known);
  if (!open) return first;
  return first + ", " + std::to_string(2 * known) + ", " + std::to_string(3 * known) + " ...";
}

// Values of one entry that fit `world` ranks beside the others' `others` ranks: the rest
// exactly when no entry is open, else any divisor of it.
std::vector<int> fitting_values(int world, int others, bool open) {
  if (world % others != 0) return {};
  const int rest = world / others;
  if (!open) return {rest};
  std::vector<int> values;
  for (int v = 1; v <= rest; ++v)
    if (rest % v == 0) values.push_back(v);
  return values;
}

// " or --tp 1 / --tp 3": each entry the user set, changed alone to a value that fits the ranks
// and that `admits` accepts (the open entry, if any, derived).
std::string fitting_layouts(int world, const std::array<int, 3>& user,
                            const std::array<int, 3>& shape, const LayoutFilter& admits) {
  const char* const names[] = {"dp", "tp", "pp"};
  std::vector<std::string> layouts;
  for (int i = 0; i < 3; ++i) {
    if (user[i] == 0) continue;
    int others = 1;
    bool open = false;
    for (int j = 0; j < 3; ++j)
      if (j != i) {
        others *= shape[j] ? shape[j] : 1;
        open = open || shape[j] == 0;
      }
    for (int v : fitting_values(world, others, open)) {
      std::array<int, 3> full = shape;
      full[i] = v;
      for (int& entry : full)
        if (entry == 0) entry = world / (others * v);
      if (admits && !admits(GridShape{full[0], full[1], full[2]})) continue;
      layouts.push_back(std::string("--") + names[i] + " " + std::to_string(v));
    }
  }
  if (layouts.empty()) return "";
  std::string text = " or " + layouts[0];
  for (size_t k = 1; k < std::min(layouts.size(), kMostLayouts); ++k) text += " / " + layouts[k];
  return layouts.size() > kMostLayouts ? text + " / ..." : text;
}

}  // namespace

GridShape resolve_grid(int world_size, int dp, int tp, int pp, const LayoutFilter& admits,
                       int cp) {
  require(dp >= 0 && tp >= 0 && pp >= 0, "dp, tp and pp must not be negative");
  require(cp >= 1, "cp must be at least 1");
  if (cp > 1) {  // the other entries fit the ranks left per context-parallel rank
    if (world_size % cp != 0)
      throw UsageError("cp " + std::to_string(cp) + " does not divide the " +
                       std::to_string(world_size) + " ranks of this job: use a multiple of " +
                       std::to_string(cp) + " ranks");
    GridShape s = resolve_grid(world_size / cp, dp, tp, pp, [&](const GridShape& g) {
      return !admits || admits(GridShape{g.dp, g.tp, g.pp, cp});
    });
    s.cp = cp;
    return s;
  }
  const std::array<int, 3> user = {dp, tp, pp};
  if ((dp == 0) + (tp == 0) + (pp == 0) > 1) {  // several left open: tp, pp default to 1
    if (tp == 0) tp = 1;
    if (pp == 0 && dp == 0) pp = 1;
  }
  const int known = (dp ? dp : 1) * (tp ? tp : 1) * (pp ? pp : 1);
  const bool open = dp == 0 || tp == 0 || pp == 0;
  if (world_size % known != 0 || (!open && known != world_size)) {
    auto shown = [](int v) { return v ? std::to_string(v) : std::string("?"); };
    throw UsageError("dp x tp x pp = " + shown(dp) + " x " + shown(tp) + " x " + shown(pp) +
                     " does not fit the " + std::to_string(world_size) +
                     " ranks of this job: use " + fitting_rank_counts(known, open) +
                     fitting_layouts(world_size, user, {dp, tp, pp}, admits));
  }
  if (dp == 0) dp = world_size / known;
  if (tp == 0) tp = world_size / known;
  if (pp == 0) pp = world_size / known;
  return GridShape{dp, tp, pp};
}

std::vector<int> Grid::members(const GridShape& s, Group g, int rank, int shard_size) {
  const int t = rank % s.tp, c = rank / s.tp % s.cp, d = rank / (s.tp * s.cp) % s.dp,
            p = rank / (s.tp * s.cp * s.dp);
  const int DC = s.dp * s.cp, D = shard_size > 0 ? shard_size : DC, dc = c + s.cp * d;
  // member i of the dp-cp group
  auto dp_cp = [&](int i) { return world_rank(s, i / s.cp, t, p, i % s.cp); };
  std::vector<int> out;
  switch (g) {
    case Group::Tp:
      for (int i = 0; i < s.tp; ++i) out.push_back(world_rank(s, d, i, p, c));
      break;
    case Group::Dp:
      for (int i = 0; i < s.dp; ++i) out.push_back(world_rank(s, i, t, p, c));
      break;
    case Group::Pp:
      for (int i = 0; i < s.pp; ++i) out.push_back(world_rank(s, d, t, i, c));
      break;
    case Group::Cp:
      for (int i = 0; i < s.cp; ++i) out.push_back(world_rank(s, d, t, p, i));
      break;
    case Group::DpCp:
      for (int i = 0; i < DC; ++i) out.push_back(dp_cp(i));
      break;
    case Group::ModelParallel:
      for (int i = 0; i < s.pp; ++i)
        for (int j = 0; j < s.tp; ++j) out.push_back(world_rank(s, d, j, i, c));
      break;
    case Group::DpShard:
      for (int i = dc / D * D; i < dc / D * D + D; ++i) out.push_back(dp_cp(i));
      break;
    case Group::DpReplica:
      for (int i = dc % D; i < DC; i += D) out.push_back(dp_cp(i));
      break;
    case Group::Ep:
      for (int i = d / s.ep * s.ep; i < d / s.ep * s.ep + s.ep; ++i)
        out.push_back(world_rank(s, i, t, p, c));
      break;
    case Group::ExpertDp:  // every cp rank of those dp ranks (rank order: cp + CP * (dp / EP))
      for (int i = d % s.ep; i < s.dp; i += s.ep)
        for (int j = 0; j < s.cp; ++j) out.push_back(world_rank(s, i, t, p, j));
      break;
    case Group::Embedding:
      if (p == 0 || p == s.pp - 1) {
        out.push_back(world_rank(s, d, t, 0, c));
        if (s.pp > 1) out.push_back(world_rank(s, d, t, s.pp - 1, c));
      }
      break;
  }
  return out;
}

// Each group is one MPI_Comm_split: the color names the group (its first member), the key
// orders ranks as members() does.
namespace {

int checked_shard_size(const GridShape& shape, int shard_size) {
  const int dp_cp = shape.dp * shape.cp;
  if (shard_size <= 0) return dp_cp;
  if (dp_cp % shard_size != 0)
    throw UsageError("zero-shard-size " + std::to_string(shard_size) +
                     " does not divide the data-parallel size " + std::to_string(shape.dp) +
                     (shape.cp > 1 ? " x cp " + std::to_string(shape.cp) : std::string()) +
                     ": use a divisor of it, or 0 (shard over the whole data-parallel group)");
  return shard_size;
}

// The shape, once its ep is known to fit: ep divides dp.
const GridShape& checked_ep(const GridShape& shape) {
  if (shape.ep < 1 || shape.dp % shape.ep != 0)
    throw UsageError("ep " + std::to_string(shape.ep) + " does not divide the data-parallel size " +
                     std::to_string(shape.dp) + ": use a divisor of it");
  return shape;
}

}  // namespace

Grid::Grid(const MpiComm& world, GridShape shape, int shard_size)
    : shape_(checked_ep(shape)),
      shard_size_(checked_shard_size(shape, shard_size)),
      dp_rank_(world.rank() / (shape.tp * shape.cp) % shape.dp),
      tp_rank_(world.rank() % shape.tp),
      pp_rank_(world.rank() / (shape.tp * shape.cp * shape.dp)),
      cp_rank_(world.rank() / shape.tp % shape.cp),
      tp_(world.split(members(shape, Group::Tp, world.rank())[0], tp_rank_)),
      dp_(world.split(members(shape, Group::Dp, world.rank())[0], dp_rank_)),
      pp_(world.split(members(shape, Group::Pp, world.rank())[0], pp_rank_)),
      cp_(world.split(members(shape, Group::Cp, world.rank())[0], cp_rank_)),
      dp_cp_(world.split(members(shape, Group::DpCp, world.rank())[0], dp_cp_rank())),
      mp_(world.split(members(shape, Group::ModelParallel, world.rank())[0], world.rank())),
      dp_shard_(world.split(members(shape, Group::DpShard, world.rank(), shard_size_)[0],
                            dp_cp_rank() % shard_size_)),
      dp_replica_(world.split(members(shape, Group::DpReplica, world.rank(), shard_size_)[0],
                              dp_cp_rank() / shard_size_)),
      ep_(world.split(members(shape, Group::Ep, world.rank())[0], ep_rank())),
      expert_dp_(world.split(members(shape, Group::ExpertDp, world.rank())[0],
                             cp_rank_ + shape.cp * (dp_rank_ / shape.ep))) {
  if (shape.size() != world.size()) MPITRAIN_THROW("grid does not match the world size");
  const MpiComm node = world.split_shared();
  local_rank_ = node.rank();
  local_size_ = node.size();
  const std::vector<int> emb = members(shape, Group::Embedding, world.rank());
  std::optional<MpiComm> split = world.split_optional(emb.empty() ? -1 : emb[0], pp_rank_);
  embedding_ = std::move(split);
}

}  // namespace mpitrain
