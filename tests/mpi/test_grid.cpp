// ranks: 2 4 8
// The parallel grid: group membership arithmetic, the real communicators built from it, and how
// a shape with unknowns is completed.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpitrain/runtime/grid.hpp"

using namespace mpitrain;

namespace {

using Ranks = std::vector<int>;

// World ranks of comm's members in its rank order.
Ranks world_ranks_of(const MpiComm& comm) {
  MPI_Group world_group, group;
  EXPECT_EQ(MPI_Comm_group(MPI_COMM_WORLD, &world_group), MPI_SUCCESS);
  EXPECT_EQ(MPI_Comm_group(comm.get(), &group), MPI_SUCCESS);
  Ranks local(comm.size()), world(comm.size());
  for (int i = 0; i < comm.size(); ++i) local[i] = i;
  EXPECT_EQ(MPI_Group_translate_ranks(group, comm.size(), local.data(), world_group, world.data()),
            MPI_SUCCESS);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  return world;
}

// Every (dp, tp, pp) whose product is world.
std::vector<GridShape> shapes_of(int world) {
  std::vector<GridShape> out;
  for (int tp = 1; tp <= world; ++tp)
    for (int pp = 1; pp <= world; ++pp)
      if (world % (tp * pp) == 0) out.push_back(GridShape{world / (tp * pp), tp, pp});
  return out;
}

std::string name(const GridShape& s) {
  return "dp" + std::to_string(s.dp) + " tp" + std::to_string(s.tp) + " pp" + std::to_string(s.pp);
}

}  // namespace

// The worked example in grid.hpp, group by group, from several ranks' points of view.
TEST(GridMembers, SixteenRanksTp2Pp4AsDocumented) {
  const GridShape s{2, 2, 4};
  const std::vector<Ranks> tp = {{0, 1}, {2, 3},   {4, 5},   {6, 7},
                                 {8, 9}, {10, 11}, {12, 13}, {14, 15}};
  const std::vector<Ranks> dp = {{0, 2},  {1, 3},  {4, 6},   {5, 7},
                                 {8, 10}, {9, 11}, {12, 14}, {13, 15}};
  const std::vector<Ranks> pp = {{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}};
  const std::vector<Ranks> mp = {{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}};
  const std::vector<Ranks> emb = {{0, 12}, {1, 13}, {2, 14}, {3, 15}};
  auto check = [&](Group g, const std::vector<Ranks>& groups) {
    for (const Ranks& group : groups)
      for (int rank : group) EXPECT_EQ(Grid::members(s, g, rank), group) << "rank " << rank;
  };
  check(Group::Tp, tp);
  check(Group::Dp, dp);
  check(Group::Pp, pp);
  check(Group::ModelParallel, mp);
  check(Group::Embedding, emb);
  for (int middle : {4, 5, 6, 7, 8, 9, 10, 11})
    EXPECT_TRUE(Grid::members(s, Group::Embedding, middle).empty()) << "rank " << middle;
  EXPECT_EQ(Grid::world_rank(s, 1, 1, 3), 15);
  EXPECT_EQ(Grid::world_rank(s, 1, 0, 2), 10);
}

TEST(GridMembers, OtherShapes) {
  const GridShape cube{2, 2, 2};  // 8 ranks
  EXPECT_EQ(Grid::members(cube, Group::Tp, 5), (Ranks{4, 5}));
  EXPECT_EQ(Grid::members(cube, Group::Dp, 5), (Ranks{5, 7}));
  EXPECT_EQ(Grid::members(cube, Group::Pp, 5), (Ranks{1, 5}));
  EXPECT_EQ(Grid::members(cube, Group::ModelParallel, 5), (Ranks{0, 1, 4, 5}));
  EXPECT_EQ(Grid::members(cube, Group::ModelParallel, 6), (Ranks{2, 3, 6, 7}));
  EXPECT_EQ(Grid::members(cube, Group::Embedding, 2), (Ranks{2, 6}));

  const GridShape dp4{4, 1, 1};
  EXPECT_EQ(Grid::members(dp4, Group::Dp, 2), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(Grid::members(dp4, Group::Tp, 2), (Ranks{2}));
  EXPECT_EQ(Grid::members(dp4, Group::Pp, 2), (Ranks{2}));
  EXPECT_EQ(Grid::members(dp4, Group::ModelParallel, 2), (Ranks{2}));
  EXPECT_EQ(Grid::members(dp4, Group::Embedding, 2), (Ranks{2}));  // one stage: first and last

  const GridShape pp4{1, 1, 4};
  EXPECT_EQ(Grid::members(pp4, Group::Pp, 1), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(Grid::members(pp4, Group::Dp, 1), (Ranks{1}));
  EXPECT_EQ(Grid::members(pp4, Group::ModelParallel, 1), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(Grid::members(pp4, Group::Embedding, 3), (Ranks{0, 3}));
  EXPECT_TRUE(Grid::members(pp4, Group::Embedding, 1).empty());

  const GridShape tp4{1, 4, 1};
  EXPECT_EQ(Grid::members(tp4, Group::Tp, 3), (Ranks{0, 1, 2, 3}));
  EXPECT_EQ(Grid::members(tp4, Group::Dp, 3), (Ranks{3}));
  EXPECT_EQ(Grid::members(tp4, Group::Pp, 3), (Ranks{3}));
  EXPECT_EQ(Grid::members(tp4, Group::ModelParallel, 3), (Ranks{0, 1, 2, 3}));
}

// On the real ranks, every shape of this world size: each communicator holds exactly the ranks
// members() names, in that order, and this rank's coordinates agree with them.
TEST(Grid, CommunicatorsMatchMembersForEveryShape) {
  const MpiComm world = MpiComm::world();
  const int me = world.rank();
  for (const GridShape& s : shapes_of(world.size())) {
    SCOPED_TRACE(name(s));
    const Grid grid(world, s);
    EXPECT_EQ(world_ranks_of(grid.tp()), Grid::members(s, Group::Tp, me));
    EXPECT_EQ(world_ranks_of(grid.dp()), Grid::members(s, Group::Dp, me));
    EXPECT_EQ(world_ranks_of(grid.pp()), Grid::members(s, Group::Pp, me));
    EXPECT_EQ(world_ranks_of(grid.model_parallel()), Grid::members(s, Group::ModelParallel, me));
    const Ranks emb = Grid::members(s, Group::Embedding, me);
    ASSERT_EQ(grid.embedding().has_value(), !emb.empty());
    if (grid.embedding()) {
      EXPECT_EQ(world_ranks_of(*grid.embedding()), emb);
    }

    EXPECT_EQ(Grid::world_rank(s, grid.dp_rank(), grid.tp_rank(), grid.pp_rank()), me);
    EXPECT_EQ(grid.tp().rank(), grid.tp_rank());
    EXPECT_EQ(grid.dp().rank(), grid.dp_rank());
    EXPECT_EQ(grid.pp().rank(), grid.pp_rank());
    EXPECT_EQ(grid.tp().size(), s.tp);
    EXPECT_EQ(grid.dp().size(), s.dp);
    EXPECT_EQ(grid.pp().size(), s.pp);
    EXPECT_EQ(grid.model_parallel().size(), s.tp * s.pp);
    EXPECT_EQ(grid.first_stage(), grid.pp_rank() == 0);
    EXPECT_EQ(grid.last_stage(), grid.pp_rank() == s.pp - 1);
    EXPECT_EQ(grid.shape().size(), world.size());
  }
}

// Hybrid sharding's worked example in grid.hpp: DP = 4, D = 2, TP = PP = 1.
TEST(GridMembers, HybridShardingAsDocumented) {
  const GridShape s{4, 1, 1};
  const std::vector<Ranks> shards = {{0, 1}, {2, 3}}, replicas = {{0, 2}, {1, 3}};
  for (const Ranks& group : shards)
    for (int rank : group) EXPECT_EQ(Grid::members(s, Group::DpShard, rank, 2), group);
  for (const Ranks& group : replicas)
    for (int rank : group) EXPECT_EQ(Grid::members(s, Group::DpReplica, rank, 2), group);
  for (int rank = 0; rank < 4; ++rank) {  // without hybrid sharding: the dp group, alone
    EXPECT_EQ(Grid::members(s, Group::DpShard, rank), (Ranks{0, 1, 2, 3}));
    EXPECT_EQ(Grid::members(s, Group::DpReplica, rank), Ranks{rank});
    EXPECT_EQ(Grid::members(s, Group::DpShard, rank, 4), (Ranks{0, 1, 2, 3}));
  }
}

// With tp and pp each dp group is cut alike: DP = 4, D = 2, TP = 2, PP = 2 (16 ranks); rank 9
// (tp 1, dp 0, pp 1) has the dp group [9, 11, 13, 15], cut into [9, 11] [13, 15].
TEST(GridMembers, HybridShardingInsideTpAndPp) {
  const GridShape s{4, 2, 2};
  EXPECT_EQ(Grid::members(s, Group::Dp, 9), (Ranks{9, 11, 13, 15}));
  EXPECT_EQ(Grid::members(s, Group::DpShard, 13, 2), (Ranks{13, 15}));
  EXPECT_EQ(Grid::members(s, Group::DpReplica, 13, 2), (Ranks{9, 13}));
  EXPECT_EQ(Grid::members(s, Group::DpShard, 0, 2), (Ranks{0, 2}));
  EXPECT_EQ(Grid::members(s, Group::DpReplica, 6, 2), (Ranks{2, 6}));
}

// On the real ranks, every shape and every shard size that divides dp: the shard and replica
// communicators hold the ranks members() names, and together they make the dp group.
TEST(Grid, HybridShardingCommunicatorsMatchMembers) {
  const MpiComm world = MpiComm::world();
  const int me = world.rank();
  for (const GridShape& s : shapes_of(world.size()))
    for (int D = 1; D <= s.dp; ++D) {
      if (s.dp % D != 0) continue;
      SCOPED_TRACE(name(s) + " shard size " + std::to_string(D));
      const Grid grid(world, s, D);
      EXPECT_EQ(grid.shard_size(), D);
      EXPECT_EQ(world_ranks_of(grid.dp_shard()), Grid::members(s, Group::DpShard, me, D));
      EXPECT_EQ(world_ranks_of(grid.dp_replica()), Grid::members(s, Group::DpReplica, me, D));
      EXPECT_EQ(grid.dp_shard().size(), D);
      EXPECT_EQ(grid.dp_replica().size(), s.dp / D);
      EXPECT_EQ(grid.dp_shard().rank() + D * grid.dp_replica().rank(), grid.dp_rank());
    }
}

// Context parallelism's worked example in grid.hpp: 8 ranks, TP = 2, CP = 2, DP = 2, PP = 1.
TEST(GridMembers, ContextParallelAsDocumented) {
  const GridShape s{2, 2, 1, 2};
  const std::vector<Ranks> tp = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  const std::vector<Ranks> cp = {{0, 2}, {1, 3}, {4, 6}, {5, 7}};
  const std::vector<Ranks> dp = {{0, 4}, {1, 5}, {2, 6}, {3, 7}};
  const std::vector<Ranks> dp_cp = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  const std::vector<Ranks> shards = {{0, 2}, {4, 6}, {1, 3}, {5, 7}};
  const std::vector<Ranks> replicas = {{0, 4}, {2, 6}, {1, 5}, {3, 7}};
  auto check = [&](Group g, const std::vector<Ranks>& groups, int D = 0) {
    for (const Ranks& group : groups)
      for (int rank : group) EXPECT_EQ(Grid::members(s, g, rank, D), group) << "rank " << rank;
  };
  check(Group::Tp, tp);
  check(Group::Cp, cp);
  check(Group::Dp, dp);
  check(Group::DpCp, dp_cp);
  check(Group::ModelParallel, tp);
  check(Group::DpShard, dp_cp);  // without hybrid sharding: the whole dp-cp group
  check(Group::DpShard, shards, 2);
  check(Group::DpReplica, replicas, 2);
  EXPECT_EQ(Grid::world_rank(s, 1, 1, 0, 1), 7);
  EXPECT_EQ(Grid::world_rank(s, 1, 0, 0, 0), 4);
  // with pp 2 (16 ranks) a stage's groups are the same shifted by 8; rank 10 is pp 1, cp 1, dp 0
  const GridShape s16{2, 2, 2, 2};
  EXPECT_EQ(Grid::members(s16, Group::Cp, 10), (Ranks{8, 10}));
  EXPECT_EQ(Grid::members(s16, Group::Pp, 10), (Ranks{2, 10}));
  EXPECT_EQ(Grid::members(s16, Group::DpCp, 10), (Ranks{8, 10, 12, 14}));
  EXPECT_EQ(Grid::members(s16, Group::Embedding, 10), (Ranks{2, 10}));
}

// On the real ranks, every shape with cp 2 (and 4): the cp and dp-cp communicators hold the
// ranks members() names, the coordinates agree, and the shard groups cut dp-cp.
TEST(Grid, ContextParallelCommunicatorsMatchMembers) {
  const MpiComm world = MpiComm::world();
  const int me = world.rank();
  for (int cp : {2, 4}) {
    if (world.size() % cp != 0) continue;
    for (GridShape s : shapes_of(world.size() / cp)) {
      s.cp = cp;
      SCOPED_TRACE(name(s) + " cp" + std::to_string(cp));
      const Grid grid(world, s, 2);
      EXPECT_EQ(world_ranks_of(grid.cp()), Grid::members(s, Group::Cp, me));
      EXPECT_EQ(world_ranks_of(grid.dp()), Grid::members(s, Group::Dp, me));
      EXPECT_EQ(world_ranks_of(grid.dp_cp()), Grid::members(s, Group::DpCp, me));
      EXPECT_EQ(world_ranks_of(grid.tp()), Grid::members(s, Group::Tp, me));
      EXPECT_EQ(world_ranks_of(grid.pp()), Grid::members(s, Group::Pp, me));
      EXPECT_EQ(world_ranks_of(grid.dp_shard()), Grid::members(s, Group::DpShard, me, 2));
      EXPECT_EQ(world_ranks_of(grid.dp_replica()), Grid::members(s, Group::DpReplica, me, 2));
      EXPECT_EQ(Grid::world_rank(s, grid.dp_rank(), grid.tp_rank(), grid.pp_rank(), grid.cp_rank()),
                me);
      EXPECT_EQ(grid.cp().rank(), grid.cp_rank());
      EXPECT_EQ(grid.dp_cp().rank(), grid.dp_cp_rank());
      EXPECT_EQ(grid.dp_cp().size(), s.dp * cp);
      for (int ep = 2; ep <= s.dp; ++ep) {  // expert parallelism inside each cp rank's dp ranks
        if (s.dp % ep != 0) continue;
        GridShape e = s;
        e.ep = ep;
        SCOPED_TRACE("ep" + std::to_string(ep));
        const Grid with_ep(world, e);
        EXPECT_EQ(world_ranks_of(with_ep.ep()), Grid::members(e, Group::Ep, me));
        EXPECT_EQ(world_ranks_of(with_ep.expert_dp()), Grid::members(e, Group::ExpertDp, me));
        EXPECT_EQ(with_ep.expert_dp().size(), s.dp / ep * cp);
      }
    }
  }
}

// Expert parallelism's worked example in grid.hpp: 8 ranks, TP = 2, EP = 2, DP = 4, PP = 1.
TEST(GridMembers, ExpertParallelAsDocumented) {
  GridShape s{4, 2, 1};
  s.ep = 2;
  const std::vector<Ranks> dp = {{0, 2, 4, 6}, {1, 3, 5, 7}};
  const std::vector<Ranks> ep = {{0, 2}, {4, 6}, {1, 3}, {5, 7}};
  const std::vector<Ranks> expert_dp = {{0, 4}, {2, 6}, {1, 5}, {3, 7}};
  auto check = [&](const GridShape& shape, Group g, const std::vector<Ranks>& groups) {
    for (const Ranks& group : groups)
      for (int rank : group) EXPECT_EQ(Grid::members(shape, g, rank), group) << "rank " << rank;
  };
  check(s, Group::Dp, dp);
  check(s, Group::Ep, ep);
  check(s, Group::ExpertDp, expert_dp);
  s.ep = 4;  // the whole dp group splits the experts; each alone holds its quarter
  check(s, Group::Ep, dp);
  check(s, Group::ExpertDp, {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}});
  s.ep = 1;  // no expert parallelism: the experts' gradients go over dp as the rest
  check(s, Group::ExpertDp, dp);
  // with pp 2 (8 ranks, DP = 2, EP = 2): rank 5 is pp 1, dp 0, tp 1
  GridShape pp2{2, 2, 2};
  pp2.ep = 2;
  EXPECT_EQ(Grid::members(pp2, Group::Ep, 5), (Ranks{5, 7}));
  EXPECT_EQ(Grid::members(pp2, Group::ExpertDp, 5), (Ranks{5}));
  // with cp (8 ranks, TP = 1, CP = 2, DP = 4, EP = 2): expert-dp holds both cp ranks
  GridShape cp2{4, 1, 1, 2};
  cp2.ep = 2;
  check(cp2, Group::Dp, dp);
  check(cp2, Group::Ep, ep);
  check(cp2, Group::ExpertDp, {{0, 1, 4, 5}, {2, 3, 6, 7}});
}

// On the real ranks, every shape and every ep dividing its dp: the ep and expert-dp
// communicators hold the ranks members() names, in that order, and ep_rank agrees.
TEST(Grid, ExpertParallelCommunicatorsMatchMembers) {
  const MpiComm world = MpiComm::world();
  const int me = world.rank();
  for (GridShape s : shapes_of(world.size()))
    for (int ep = 1; ep <= s.dp; ++ep) {
      if (s.dp % ep != 0) continue;
      s.ep = ep;
      SCOPED_TRACE(name(s) + " ep" + std::to_string(ep));
      const Grid grid(world, s);
      EXPECT_EQ(world_ranks_of(grid.ep()), Grid::members(s, Group::Ep, me));
      EXPECT_EQ(world_ranks_of(grid.expert_dp()), Grid::members(s, Group::ExpertDp, me));
      EXPECT_EQ(grid.ep().rank(), grid.ep_rank());
      EXPECT_EQ(grid.ep().size(), ep);
      EXPECT_EQ(grid.expert_dp().size(), s.dp / ep);
    }
}

// ep must divide dp: the user's error, named.
TEST(Grid, ExpertParallelNotFittingIsAUsageError) {
  const MpiComm world = MpiComm::world();
  GridShape s{world.size(), 1, 1};
  s.ep = world.size() + 1;
  EXPECT_THROW(Grid(world, s), UsageError);
}

TEST(ResolveGrid, ContextParallelFixedTheOthersFitTheRest) {
  const GridShape s = resolve_grid(8, 0, 2, 1, {}, 2);
  EXPECT_EQ(s.dp, 2);
  EXPECT_EQ(s.tp, 2);
  EXPECT_EQ(s.cp, 2);
  EXPECT_EQ(resolve_grid(8, 0, 0, 0, {}, 4).dp, 2);
  EXPECT_THROW(resolve_grid(6, 0, 0, 0, {}, 4), UsageError);  // 4 does not divide 6
  EXPECT_THROW(resolve_grid(8, 4, 1, 1, {}, 4), UsageError);  // 4 x 4 ranks
}

// A shard size that does not divide dp is the user's error, named with the dp size.
TEST(Grid, ShardSizeNotDividingDpIsAUsageError) {
  const MpiComm world = MpiComm::world();
  const GridShape s{world.size(), 1, 1};
  for (int D : {3, world.size() + 1}) {
    try {
      const Grid grid(world, s, D);
      ADD_FAILURE() << "shard size " << D << " of dp " << world.size() << " was accepted";
    } catch (const UsageError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("zero-shard-size " + std::to_string(D)), std::string::npos) << what;
      EXPECT_NE(what.find("data-parallel size " + std::to_string(world.size())), std::string::npos)
          << what;
    }
  }
  EXPECT_EQ(Grid(world, s, 0).shard_size(), world.size());
}

TEST(ResolveGrid, OneUnknownIsDerived) {
  auto same = [](GridShape a, GridShape b) { return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp; };
  EXPECT_TRUE(same(resolve_grid(8, 0, 2, 2), {2, 2, 2}));
  EXPECT_TRUE(same(resolve_grid(8, 2, 0, 2), {2, 2, 2}));
  EXPECT_TRUE(same(resolve_grid(16, 2, 2, 0), {2, 2, 4}));
  EXPECT_TRUE(same(resolve_grid(8, 0, 8, 1), {1, 8, 1}));
  EXPECT_TRUE(same(resolve_grid(6, 3, 1, 2), {3, 1, 2}));  // nothing unknown
}

TEST(ResolveGrid, SeveralUnknownsLeaveTpAndPpAtOne) {
  auto same = [](GridShape a, GridShape b) { return a.dp == b.dp && a.tp == b.tp && a.pp == b.pp; };
  EXPECT_TRUE(same(resolve_grid(8, 0, 0, 0), {8, 1, 1}));
  EXPECT_TRUE(same(resolve_grid(8, 0, 2, 0), {4, 2, 1}));
  EXPECT_TRUE(same(resolve_grid(8, 0, 0, 4), {2, 1, 4}));
  EXPECT_TRUE(same(resolve_grid(1, 0, 0, 0), {1, 1, 1}));
  EXPECT_TRUE(same(resolve_grid(8, 2, 0, 0), {2, 1, 4}));  // dp given: tp = 1, pp derived
}

TEST(ResolveGrid, MismatchIsAUsageErrorNamingBoth) {
  auto message = [](int world, int dp, int tp, int pp) -> std::string {
    try {
      resolve_grid(world, dp, tp, pp);
    } catch (const UsageError& e) {
      return e.what();
    }
    return "no UsageError";
  };
  const std::string given = message(4, 3, 1, 1);
  EXPECT_NE(given.find("dp x tp x pp = 3 x 1 x 1"), std::string::npos) << given;
  EXPECT_NE(given.find("the 4 ranks of this job"), std::string::npos) << given;
  const std::string open = message(4, 3, 0, 0);
  EXPECT_NE(open.find("dp x tp x pp = 3 x 1 x "), std::string::npos) << open;
  EXPECT_NE(open.find("the 4 ranks of this job"), std::string::npos) << open;
  EXPECT_THROW(resolve_grid(8, 0, 3, 0), UsageError);  // 3 does not divide 8
  EXPECT_THROW(resolve_grid(8, 2, 2, 3), UsageError);
  EXPECT_THROW(resolve_grid(8, -2, 0, 0), UsageError);
}
