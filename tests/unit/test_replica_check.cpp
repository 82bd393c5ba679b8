// Replica checksums and the drift fault on one rank (the comparison over ranks is in
// tests/mpi/test_guards.cpp and tests/e2e/replica_drift.sh).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/train/replica_check.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;

TEST(TensorHash, ChangesWithAnyOneValue) {
  std::vector<float> a(1000);
  for (size_t i = 0; i < a.size(); ++i) a[i] = std::sin(0.1f * static_cast<float>(i));
  const uint64_t h = tensor_hash(a.data(), a.size());
  EXPECT_EQ(tensor_hash(a.data(), a.size()), h);
  for (size_t i : {size_t{0}, size_t{499}, size_t{999}}) {
    std::vector<float> b = a;
    b[i] = std::nextafter(b[i], 2.0f);  // one ulp
    EXPECT_NE(tensor_hash(b.data(), b.size()), h) << i;
  }
  std::vector<float> zeros(4, 0.0f), negative_zeros(4, -0.0f);  // the bits count, not the value
  EXPECT_NE(tensor_hash(zeros.data(), 4), tensor_hash(negative_zeros.data(), 4));
  EXPECT_NE(tensor_hash(a.data(), 999), h);
}

TEST(ReplicasAgree, OneReplicaAlwaysAgrees) {
  mpitrain::test::start_mpi();
  ModelConfig c;
  c.n_layer = 2;
  const ParamLayout layout(c);
  std::vector<float> params(layout.total(), 0.5f);
  MpiCommunicator dp(MPI_COMM_WORLD), world(MPI_COMM_WORLD);
  EXPECT_TRUE(replicas_agree(layout, params.data(), dp, world, 1));
}

TEST(DriftFault, MovesOneValueOfItsRankByOneUlpAfterItsStep) {
  if (!FaultPlan::kCompiledIn) GTEST_SKIP() << "fault injection is compiled out";
  ModelConfig c;
  c.n_layer = 2;
  const ParamLayout layout(c);
  std::vector<float> params(layout.total(), -0.75f);
  const std::vector<float> before = params;
  const FaultPlan plan = FaultPlan::parse("drift:rank=1:step=3");
  apply_drift_fault(plan, layout, params.data(), 0, 3);  // another rank
  apply_drift_fault(plan, layout, params.data(), 1, 2);  // another step
  EXPECT_EQ(params, before);
  apply_drift_fault(plan, layout, params.data(), 1, 3);
  size_t changed = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i] == before[i]) continue;
    ++changed;
    EXPECT_EQ(std::bit_cast<uint32_t>(params[i]) - std::bit_cast<uint32_t>(before[i]), 1u);
    EXPECT_EQ(i, layout.tensors()[layout.tensors().size() / 2].offset);
  }
  EXPECT_EQ(changed, 1u);
}
