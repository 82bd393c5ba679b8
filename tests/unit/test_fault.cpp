// Fault injection plans: parsing MPITRAIN_FAULT and when a plan fires.
#include <gtest/gtest.h>

#include <unistd.h>

#include <csignal>
#include <string>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/fault.hpp"

using namespace mpitrain;

namespace {

// The message of the UsageError that parse(text) throws ("" if it does not).
std::string parse_error(const std::string& text) {
  try {
    FaultPlan::parse(text);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FaultParse, EmptyIsNoFault) {
  EXPECT_EQ(FaultPlan::parse("").kind(), FaultKind::None);
  EXPECT_EQ(FaultPlan().kind(), FaultKind::None);
}

TEST(FaultParse, KillWithAndWithoutStep) {
  const FaultPlan a = FaultPlan::parse("kill:phase=write:rank=1");
  EXPECT_EQ(a.kind(), FaultKind::Kill);
  EXPECT_EQ(a.phase(), "write");
  EXPECT_EQ(a.rank(), 1);
  EXPECT_FALSE(a.step().has_value());
  const FaultPlan b = FaultPlan::parse("kill:step=4:phase=rename:rank=0");  // any key order
  EXPECT_EQ(b.phase(), "rename");
  EXPECT_EQ(b.rank(), 0);
  EXPECT_EQ(b.step(), 4);
}

TEST(FaultParse, HangNanDriftVersion) {
  const FaultPlan hang = FaultPlan::parse("hang:rank=1:step=3");
  EXPECT_EQ(hang.kind(), FaultKind::Hang);
  EXPECT_EQ(hang.phase(), "step");
  EXPECT_EQ(hang.rank(), 1);
  EXPECT_EQ(hang.step(), 3);
  const FaultPlan nan = FaultPlan::parse("nan:layer=2:step=5");
  EXPECT_EQ(nan.kind(), FaultKind::Nan);
  EXPECT_EQ(nan.layer(), 2);
  EXPECT_EQ(nan.rank(), -1);
  EXPECT_EQ(nan.step(), 5);
  const FaultPlan drift = FaultPlan::parse("drift:step=4:rank=3");
  EXPECT_EQ(drift.kind(), FaultKind::Drift);
  EXPECT_EQ(drift.rank(), 3);
  EXPECT_EQ(drift.step(), 4);
  const FaultPlan version = FaultPlan::parse("version:rank=1");
  EXPECT_EQ(version.kind(), FaultKind::Version);
  EXPECT_EQ(version.rank(), 1);
  EXPECT_FALSE(version.step().has_value());
}

TEST(FaultFires, ForItsKindRankAndStepOnly) {
  const FaultPlan drift = FaultPlan::parse("drift:rank=3:step=4");
  EXPECT_TRUE(drift.fires(FaultKind::Drift, 3, 4));
  EXPECT_FALSE(drift.fires(FaultKind::Drift, 2, 4));
  EXPECT_FALSE(drift.fires(FaultKind::Drift, 3, 5));
  EXPECT_FALSE(drift.fires(FaultKind::Nan, 3, 4));
  const FaultPlan nan = FaultPlan::parse("nan:layer=0");  // any rank, every step
  EXPECT_TRUE(nan.fires(FaultKind::Nan, 0, 1));
  EXPECT_TRUE(nan.fires(FaultKind::Nan, 7, 9));
  EXPECT_FALSE(FaultPlan().fires(FaultKind::None, 0, 0));
}

TEST(FaultParse, BadTextIsUsageErrorNamingTheVariable) {
  const std::pair<std::string, std::string> cases[] = {
      {"freeze:rank=0", "unknown fault kind 'freeze'"},
      {"hang:phase=write:rank=0", "a hang fault takes no phase="},
      {"hang:step=2", "no rank="},
      {"nan:rank=0:layer=1", "a nan fault takes no rank="},
      {"nan:step=1", "no layer="},
      {"nan:layer=x", "layer='x' is not a number"},
      {"drift:step=2", "no rank="},
      {"version:rank=1:step=2", "a version fault takes no step="},
      {"kill:phase=flush:rank=0", "unknown phase 'flush'"},
      {"kill:phase=write", "no rank="},
      {"kill:rank=0", "no phase="},
      {"kill:phase=write:rank=-1", "rank='-1' is not a number"},
      {"kill:phase=write:rank=1x", "rank='1x' is not a number"},
      {"kill:phase=write:rank=0:step=", "step='' is not a number"},
      {"kill:phase=write:rank=0:color=red", "unknown key 'color'"},
      {"kill:phase=write:rank=0:rank=1", "'rank' is given twice"},
      {"kill:phase", "'phase' is not key=value"},
      {"kill::rank=0", "'' is not key=value"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = parse_error(text);
    EXPECT_NE(message.find("MPITRAIN_FAULT='" + text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << text << " -> " << message;
  }
}

TEST(FaultAt, OtherPhaseRankOrStepDoesNothing) {
  const FaultPlan plan = FaultPlan::parse("kill:phase=write:rank=1:step=4");
  plan.at("close", 1, 4);
  plan.at("write", 0, 4);
  plan.at("write", 1, 5);
  FaultPlan().at("write", 1, 4);
  SUCCEED();
}

TEST(FaultAt, HangSleepsInItsStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const FaultPlan plan = FaultPlan::parse("hang:rank=1:step=2");
  plan.at("step", 1, 1);  // another step: returns at once
  plan.at("step", 0, 2);  // another rank
  plan.at("write", 1, 2); // another phase
  // Still asleep after a second: the alarm ends it.
  EXPECT_EXIT(
      {
        alarm(1);
        plan.at("step", 1, 2);
      },
      ::testing::KilledBySignal(SIGALRM), "fault injection: rank 1 hangs in step 2");
}

TEST(FaultAt, KillsAtItsPhaseRankAndStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const FaultPlan plan = FaultPlan::parse("kill:phase=write:rank=1:step=4");
  EXPECT_EXIT(plan.at("write", 1, 4), ::testing::KilledBySignal(SIGKILL),
              "fault injection: rank 1 kills itself at phase write of step 4");
  const FaultPlan any_step = FaultPlan::parse("kill:phase=rename:rank=0");
  EXPECT_EXIT(any_step.at("rename", 0, 7), ::testing::KilledBySignal(SIGKILL),
              "rank 0 kills itself at phase rename of step 7");
}
