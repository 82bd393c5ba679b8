// Fault injection plans: parsing MPITRAIN_FAULT and when a plan fires.
#include <gtest/gtest.h>

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

TEST(FaultParse, BadTextIsUsageErrorNamingTheVariable) {
  const std::pair<std::string, std::string> cases[] = {
      {"hang:phase=write:rank=0", "unknown fault kind 'hang'"},
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

TEST(FaultAt, KillsAtItsPhaseRankAndStep) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const FaultPlan plan = FaultPlan::parse("kill:phase=write:rank=1:step=4");
  EXPECT_EXIT(plan.at("write", 1, 4), ::testing::KilledBySignal(SIGKILL),
              "fault injection: rank 1 kills itself at phase write of step 4");
  const FaultPlan any_step = FaultPlan::parse("kill:phase=rename:rank=0");
  EXPECT_EXIT(any_step.at("rename", 0, 7), ::testing::KilledBySignal(SIGKILL),
              "rank 0 kills itself at phase rename of step 7");
}
