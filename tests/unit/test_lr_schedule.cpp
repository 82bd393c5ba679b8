#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <utility>
#include <vector>

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
  EXPECT_EQ(parse_lr_decay("wsd"), LrDecay::Wsd);
  EXPECT_THROW(parse_lr_decay("step"), UsageError);
  EXPECT_EQ(parse_wsd_decay("sqrt"), WsdDecay::Sqrt);
  EXPECT_THROW(parse_wsd_decay("minus_sqrt"), UsageError);
}

// Warmup-stable-decay over 20 steps, 2 of warm-up, the last 5 decaying, against Megatron-LM's
// OptimizerParamScheduler.get_lr written out in Python (its steps count from 1 after the step,
// ours from 0 before it: our step s is its num_steps s + 1, its lr_decay_steps our total 20):
//   anneal_start = 20 - 5; coeff = 1 before it, else f((num_steps - anneal_start) / 5)
//   lr = min + coeff (max - min), for num_steps 16..20 (our steps 15..19), max 1, min 0.1:
//   linear      0.8200000000000001 0.64 0.4600000000000001 0.27999999999999997 0.1
//   cosine      0.9140576474687263 0.6890576474687263 0.41094235253127376 0.18594235253127372 0.1
//   minus_sqrt  0.5975077640500379 0.4307900211696917 0.30286299768266495 0.19501552810007572 0.1
//   exponential 0.7669910139330234 0.5641449098593582 0.3875571196956048 0.2338285194973314 0.1
// (so the last step reaches min, as our cosine and linear do).
TEST(LrSchedule, WarmupStableDecayIsMegatronsWsd) {
  const std::vector<std::pair<WsdDecay, std::vector<double>>> shapes = {
      {WsdDecay::Linear, {0.8200000000000001, 0.64, 0.4600000000000001, 0.27999999999999997, 0.1}},
      {WsdDecay::Cosine,
       {0.9140576474687263, 0.6890576474687263, 0.41094235253127376, 0.18594235253127372, 0.1}},
      {WsdDecay::Sqrt,
       {0.5975077640500379, 0.4307900211696917, 0.30286299768266495, 0.19501552810007572, 0.1}},
      {WsdDecay::Exponential,
       {0.7669910139330234, 0.5641449098593582, 0.3875571196956048, 0.2338285194973314, 0.1}}};
  for (const auto& [shape, tail] : shapes) {
    const LrSchedule s{LrDecay::Wsd, 1.0, 0.1, 2, 20, 5, shape};
    EXPECT_NO_THROW(s.check());
    EXPECT_DOUBLE_EQ(s.at(0), 0.5);
    for (int step = 1; step <= 14; ++step) EXPECT_EQ(s.at(step), 1.0) << step;  // stable
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(s.at(15 + i), tail[i], 1e-15) << 15 + i;  // ~1 ulp
  }
}

// The decay must fit after the warm-up; wsd without its decay steps is refused.
TEST(LrSchedule, AWsdDecayThatDoesNotFitIsRefused) {
  EXPECT_NO_THROW((LrSchedule{LrDecay::Wsd, 1.0, 0.1, 2, 20, 18}.check()));
  EXPECT_DOUBLE_EQ((LrSchedule{LrDecay::Wsd, 1.0, 0.1, 2, 20, 18}.at(2)), 0.95);  // decays at once
  try {
    LrSchedule{LrDecay::Wsd, 1.0, 0.1, 2, 20, 19}.check();
    ADD_FAILURE() << "no refusal";
  } catch (const UsageError& e) {
    EXPECT_STREQ(e.what(),
                 "lr-wsd-decay-steps 19 does not fit after warmup-steps 2 in the schedule's 20 "
                 "steps: the decay starts after the warm-up");
  }
  EXPECT_THROW((LrSchedule{LrDecay::Wsd, 1.0, 0.1, 2, 20, 0}.check()), UsageError);
  EXPECT_NO_THROW((LrSchedule{LrDecay::Cosine, 1.0, 0.1, 2, 20, 0}.check()));
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
