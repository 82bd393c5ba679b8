#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "mpitrain/optim/lr_schedule.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

TEST(LrSchedule, WarmupThenCosineToMin) {
  LrSchedule s{LrDecay::Cosine, 1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);        // decay starts at max
  // progress p = (step - warmup) / (total - warmup - 1)
  EXPECT_NEAR(s.at(8), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 4 / 9.0)), 1e-12);
  EXPECT_DOUBLE_EQ(s.at(13), 0.1);       // last step reaches min
}

TEST(LrSchedule, LinearAndConstant) {
  LrSchedule lin{LrDecay::Linear, 2.0, 0.0, 0, 5};
  EXPECT_DOUBLE_EQ(lin.at(0), 2.0);
  EXPECT_DOUBLE_EQ(lin.at(2), 1.0);
  EXPECT_DOUBLE_EQ(lin.at(4), 0.0);
  LrSchedule c{LrDecay::Constant, 0.5, 0.0, 2, 10};
  EXPECT_DOUBLE_EQ(c.at(0), 0.25);
  EXPECT_DOUBLE_EQ(c.at(9), 0.5);
}

TEST(LrSchedule, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_lr_decay("linear"), LrDecay::Linear);
  EXPECT_THROW(parse_lr_decay("step"), UsageError);
}

// A resume with another --steps (150 -> 90) keeps the schedule the run started with and says so;
// --lr-decay-steps sets another length on purpose; a checkpoint without the field: --steps.
TEST(LrSchedule, AResumeKeepsTheRecordedLength) {
  const LrSchedule fresh{LrDecay::Cosine, 1e-3, 1e-4, 10, 90};
  LrSchedule kept = fresh;
  const std::string note = resume_schedule(kept, 0, 90, 150, 60);
  EXPECT_EQ(kept.total_steps, 150);
  EXPECT_DOUBLE_EQ(kept.at(60), (LrSchedule{LrDecay::Cosine, 1e-3, 1e-4, 10, 150}.at(60)));
  // 7.42e-4 over 150 steps, 3.68e-4 over 90 (computed in double in Python: same formula)
  EXPECT_EQ(note,
            "lr schedule at step 61: decays over the 150 steps of the run that started it, not "
            "this run's --steps 90: lr 0.000742 (0.000368 over 90); --lr-decay-steps 90 to "
            "change it");

  LrSchedule asked = fresh;
  EXPECT_EQ(resume_schedule(asked, 90, 90, 150, 60),
            "lr schedule at step 61: --lr-decay-steps 90 replaces the checkpoint's 150-step "
            "decay: lr 0.000368 (0.000742 over 150)");
  EXPECT_EQ(asked.total_steps, 90);

  LrSchedule same = fresh;
  EXPECT_EQ(resume_schedule(same, 0, 150, 150, 60), "");  // the same --steps: nothing to say
  EXPECT_EQ(same.total_steps, 150);
  LrSchedule old = fresh;
  EXPECT_EQ(resume_schedule(old, 0, 90, 0, 60), "");  // not recorded: this run's --steps
  EXPECT_EQ(old.total_steps, 90);
  LrSchedule constant{LrDecay::Constant, 1e-3, 1e-4, 10, 90};
  EXPECT_EQ(resume_schedule(constant, 0, 90, 150, 60), "");  // no decay to reshape
}
