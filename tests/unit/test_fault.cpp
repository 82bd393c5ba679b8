// Fault injection plans: parsing MPITRAIN_FAULT and when a plan fires.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
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

// at() and fires() are empty in a build with MPITRAIN_FAULT_INJECTION=OFF.
#define SKIP_UNLESS_COMPILED_IN() \
  if (!FaultPlan::kCompiledIn)    \
  GTEST_SKIP() << "this build has no fault injection (MPITRAIN_FAULT_INJECTION=OFF)"

// Sets MPITRAIN_FAULT for one scope.
class ScopedFaultEnv {
 public:
  explicit ScopedFaultEnv(const char* text) { setenv(FaultPlan::kEnvVar, text, 1); }
  ~ScopedFaultEnv() { unsetenv(FaultPlan::kEnvVar); }
  ScopedFaultEnv(const ScopedFaultEnv&) = delete;
  ScopedFaultEnv& operator=(const ScopedFaultEnv&) = delete;
};

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

TEST(FaultParse, EveryPhase) {
  for (const char* phase :
       {"staged", "write", "close", "rename", "latest", "prune", "step", "pair-rename"})
    EXPECT_EQ(FaultPlan::parse(std::string("kill:phase=") + phase + ":rank=0").phase(), phase);
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
  const FaultPlan delay = FaultPlan::parse("delay:phase=latest:rank=0:step=2:seconds=3");
  EXPECT_EQ(delay.kind(), FaultKind::Delay);
  EXPECT_EQ(delay.phase(), "latest");
  EXPECT_EQ(delay.rank(), 0);
  EXPECT_EQ(delay.step(), 2);
  EXPECT_EQ(delay.seconds(), 3);
  const FaultPlan version = FaultPlan::parse("version:rank=1");
  EXPECT_EQ(version.kind(), FaultKind::Version);
  EXPECT_EQ(version.rank(), 1);
  EXPECT_FALSE(version.step().has_value());
}

TEST(FaultFires, ForItsKindRankAndStepOnly) {
  SKIP_UNLESS_COMPILED_IN();
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
      {"delay:phase=write:rank=0", "no seconds="},
      {"delay:phase=write:rank=0:seconds=0", "seconds='0' is not a number in [1, 3600]"},
      {"kill:phase=write:rank=0:seconds=2", "a kill fault takes no seconds="},
      {"kill::rank=0", "'' is not key=value"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string message = parse_error(text);
    EXPECT_NE(message.find("MPITRAIN_FAULT='" + text + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << text << " -> " << message;
  }
}

TEST(FaultParse, ErrorListsEveryPhase) {
  const std::string message = parse_error("kill:phase=flush:rank=0");
  EXPECT_NE(message.find("kill:phase=staged|reserved|write|close|rename|latest|prune|step|"
                         "pair-rename:rank=R"),
            std::string::npos)
      << message;
}

TEST(FaultDescribe, EachKindInWords) {
  const std::pair<std::string, std::string> cases[] = {
      {"kill:phase=write:rank=1:step=4", "rank 1 will SIGKILL itself at phase write of step 4"},
      {"kill:phase=prune:rank=0",
       "rank 0 will SIGKILL itself at phase prune of the first step that gets there"},
      {"hang:rank=2:step=3", "rank 2 will hang (sleep for a day) at the start of step 3"},
      {"hang:rank=2", "rank 2 will hang (sleep for a day) at the start of its first step"},
      {"nan:layer=1:step=5",
       "the ranks holding block 1 will put a NaN into its gradient in step 5"},
      {"nan:layer=0", "the ranks holding block 0 will put a NaN into its gradient in every step"},
      {"drift:rank=3:step=4",
       "rank 3 will change one of its parameters by one ulp after the update of step 4"},
      {"drift:rank=3",
       "rank 3 will change one of its parameters by one ulp after the update of every step"},
      {"version:rank=1", "rank 1 will report another build id at start-up"},
      {"delay:phase=write:rank=0:step=4:seconds=2", "rank 0 will pause 2 s at phase write of step 4"},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(FaultPlan::parse(text).describe(), expected);
  EXPECT_EQ(FaultPlan().describe(), "no fault");
}

TEST(FaultDescribe, WarningNamesTheTextAndTheFault) {
  const FaultPlan plan = FaultPlan::parse("kill:phase=write:rank=1:step=4");
  EXPECT_TRUE(plan.armed());
  EXPECT_FALSE(FaultPlan().armed());
  EXPECT_EQ(plan.warning(),
            "WARNING: fault injection armed by MPITRAIN_FAULT='kill:phase=write:rank=1:step=4': "
            "rank 1 will SIGKILL itself at phase write of step 4 — unset MPITRAIN_FAULT for a "
            "production run");
}

TEST(FaultEnv, SetParsesOrIsRefusedWhenCompiledOut) {
  {
    const ScopedFaultEnv env("");
    EXPECT_FALSE(FaultPlan::from_env().armed());  // empty is unset, in either build
  }
  const ScopedFaultEnv env("kill:phase=latest:rank=0:step=4");
  if (FaultPlan::kCompiledIn) {
    EXPECT_EQ(FaultPlan::from_env().phase(), "latest");
    return;
  }
  try {
    FaultPlan::from_env();
    ADD_FAILURE() << "a set MPITRAIN_FAULT was accepted by a build without fault injection";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "MPITRAIN_FAULT='kill:phase=latest:rank=0:step=4': this build has no fault "
                 "injection (MPITRAIN_FAULT_INJECTION=OFF)");
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
  SKIP_UNLESS_COMPILED_IN();
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

TEST(FaultAt, DelayPausesAtItsPhaseAndGoesOn) {
  SKIP_UNLESS_COMPILED_IN();
  const FaultPlan plan = FaultPlan::parse("delay:phase=write:rank=1:step=2:seconds=1");
  const auto t0 = std::chrono::steady_clock::now();
  plan.at("write", 1, 3);  // another step, rank or phase: returns at once
  plan.at("write", 0, 2);
  plan.at("close", 1, 2);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
  plan.at("write", 1, 2);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
}

TEST(FaultAt, KillsAtItsPhaseRankAndStep) {
  SKIP_UNLESS_COMPILED_IN();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const FaultPlan plan = FaultPlan::parse("kill:phase=write:rank=1:step=4");
  EXPECT_EXIT(plan.at("write", 1, 4), ::testing::KilledBySignal(SIGKILL),
              "fault injection: rank 1 kills itself at phase write of step 4");
  const FaultPlan any_step = FaultPlan::parse("kill:phase=rename:rank=0");
  EXPECT_EXIT(any_step.at("rename", 0, 7), ::testing::KilledBySignal(SIGKILL),
              "rank 0 kills itself at phase rename of step 7");
  const FaultPlan latest = FaultPlan::parse("kill:phase=latest:rank=2:step=4");
  EXPECT_EXIT(latest.at("latest", 2, 4), ::testing::KilledBySignal(SIGKILL),
              "rank 2 kills itself at phase latest of step 4");
}
