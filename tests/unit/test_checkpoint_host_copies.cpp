// The host copies a device's checkpoints need (train/checkpoint_mirror.hpp mirror_floats) and
// when they are made (train/checkpointer.hpp plan_saves): a save's on the writers alone, a load's
// on every rank; made at set-up only where saves are planned; a node that cannot hold planned
// saves' copies is refused before any work. The state is described, not allocated: a 7B model.
#include <gtest/gtest.h>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/checkpointer.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;

namespace {

constexpr size_t kParams = 7'000'000'000;

// A rank's state under Adam (two buffers): `held` parameters, `owned` of them its optimizer's.
struct Described {
  ModelConfig config;
  ParamLayout layout{config};
  CheckpointState state(size_t owned, bool separate_master, bool writer,
                        size_t held = kParams) const {
    return {config,
            layout,
            nullptr,
            ShardRanges::whole(held),
            ShardRanges::whole(owned),
            nullptr,
            separate_master,
            OptimizerKind::AdamW,
            {nullptr, nullptr},
            Precision::Bf16,
            writer};
  }
};

}  // namespace

// ZeRO-0 in bf16, 8 ranks a node: a load holds params, master, m and v (16 bytes a parameter,
// 112 GB) on every rank, as every rank held before; a save's copies (master, m, v: 84 GB) are
// the writer's, none elsewhere.
TEST(CheckpointHostCopies, SavesOnTheWriterLoadsEverywhere) {
  const Described d;
  const CheckpointState writer = d.state(kParams, true, true);
  const CheckpointState other = d.state(kParams, true, false);
  EXPECT_EQ(mirror_floats(writer, MirrorUse::Load), 4 * kParams);
  EXPECT_EQ(mirror_floats(other, MirrorUse::Load), 4 * kParams);
  EXPECT_EQ(mirror_floats(writer, MirrorUse::Save), 3 * kParams);
  EXPECT_EQ(mirror_floats(other, MirrorUse::Save), 0u);
  // fp32 (the master a view of the params): the load needs no master of its own.
  EXPECT_EQ(mirror_floats(d.state(kParams, false, true), MirrorUse::Load), 3 * kParams);
  EXPECT_EQ(mirror_floats(d.state(kParams, false, true), MirrorUse::Save), 3 * kParams);
  // ZeRO-1 of 2: every rank writes its half of the master and state, loads all the params.
  const CheckpointState half = d.state(kParams / 2, true, true);
  EXPECT_EQ(mirror_floats(half, MirrorUse::Save), 3 * kParams / 2);
  EXPECT_EQ(mirror_floats(half, MirrorUse::Load), kParams + 3 * kParams / 2);
}

// One rank (node = world) writing a 7T model: 84 TB of copies fit no host; planned saves are
// refused, unplanned ones warned of.
TEST(CheckpointHostCopies, PlannedSavesMustFitTheNode) {
  mpitrain::test::start_mpi();
  const Described d;
  const size_t huge = 1000 * kParams;
  const CheckpointState writer = d.state(huge, true, true, huge);
  const MpiComm self(MPI_COMM_SELF, false);
  const NodeMemory memory = node_memory(mirror_floats(writer, MirrorUse::Save), self, self);
  EXPECT_EQ(memory.need, 4.0 * 3 * huge);
  ASSERT_FALSE(memory.fits()) << memory.text();
  try {
    plan_saves({true, false, true}, writer, self, self);
    ADD_FAILURE() << "planned saves whose copies do not fit were accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoints: a save copies the writers' master and "
                                         "optimizer state from the device to 84000.00 GB of host "
                                         "memory on a node, more than 3/4 of the"),
              std::string::npos)
        << e.what();
  }
  const SavePlan stop_only = plan_saves({false, false, true}, writer, self, self);
  EXPECT_FALSE(stop_only.mirror_now);
  EXPECT_FALSE(stop_only.async);
  EXPECT_EQ(stop_only.note.rfind("warning: a stop's checkpoint (a signal) copies", 0), 0u)
      << stop_only.note;
  // A rank that writes nothing copies nothing, whatever is planned.
  const SavePlan other =
      plan_saves({true, false, true}, d.state(huge, true, false, huge), self, self);
  EXPECT_EQ(other.staging_floats, 0u);
  EXPECT_TRUE(other.mirror_now);
}

// A small state: the copies are made at set-up where saves are planned, at a stop's save where
// not; a host state (not mirrored) without --async-save stages nothing.
TEST(CheckpointHostCopies, MadeAtSetUpOnlyWherePlanned) {
  mpitrain::test::start_mpi();
  const Described d;
  const CheckpointState small = d.state(1000, true, true, 1000);
  const MpiComm self(MPI_COMM_SELF, false);
  const SavePlan planned = plan_saves({true, true, true}, small, self, self);
  EXPECT_TRUE(planned.mirror_now);
  EXPECT_EQ(planned.staging_floats, 3000u);
  EXPECT_EQ(planned.async, AsyncSaver::threads_supported());
  EXPECT_EQ(planned.note.rfind("checkpoints: host copies of the writers' state, 0.00 GB", 0), 0u)
      << planned.note;
  EXPECT_NE(planned.note.find("(rank 0: 3000 floats), made now"), std::string::npos)
      << planned.note;
  const SavePlan unplanned = plan_saves({false, false, true}, small, self, self);
  EXPECT_FALSE(unplanned.mirror_now);
  EXPECT_NE(unplanned.note.find(", made at a stop's save"), std::string::npos) << unplanned.note;
  const SavePlan host = plan_saves({true, false, false}, small, self, self);
  EXPECT_EQ(host.staging_floats, 0u);
  EXPECT_TRUE(host.note.empty());
  // --async-save auto on one rank whose threads take every CPU: its writer waits on no other
  // rank's, so the saves go in the background from the first (the many-rank case, synchronous
  // until a save is slow: tests/mpi/test_checkpoint.cpp)
  const SavePlan one = plan_saves({true, true, false, true, false}, small, self, self);
  EXPECT_EQ(one.async, AsyncSaver::threads_supported());
  EXPECT_FALSE(one.async_when_slow);
}
