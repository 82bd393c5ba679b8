// The settings a checkpoint keeps for a resume (train/kept_settings.hpp): recorded exactly, taken
// where not given, named where given otherwise, and a line this build cannot read refused.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpitrain/app/options.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/kept_settings.hpp"
#include "mpitrain/train/model_setup.hpp"

using namespace mpitrain;

namespace {

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), {"trainer", "--train-data", "x.h5"});
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST(KeptSettings, ARunsSettingsComeBackExactlyWhereNotGiven) {
  // values that a decimal text with too few digits would not give back bit for bit
  const Options run = parse({"--precision", "bf16", "--lr", "0.0003000000000000001",
                             "--beta2", "0.95", "--adam-eps", "1e-7", "--weight-decay", "0",
                             "--warmup-steps", "0", "--lr-schedule", "wsd",
                             "--lr-wsd-decay-steps", "7", "--lr-wsd-decay-style", "sqrt",
                             "--min-lr-ratio", "0.3333333333333333", "--grad-clip", "0.5"});
  const std::string recorded = kept_settings(run.train);
  Options resumed = parse({});
  EXPECT_EQ(take_kept_settings(resumed, recorded), "");
  EXPECT_EQ(resumed.train.precision, "bf16");
  EXPECT_EQ(resumed.train.lr, 0.0003000000000000001);
  EXPECT_EQ(resumed.train.beta2, 0.95);
  EXPECT_EQ(resumed.train.adam_eps, 1e-7);
  EXPECT_EQ(resumed.train.weight_decay, 0.0);
  EXPECT_EQ(resumed.train.warmup_steps, 0);
  EXPECT_EQ(resumed.train.lr_schedule, "wsd");
  EXPECT_EQ(resumed.train.lr_wsd_decay_steps, 7);
  EXPECT_EQ(resumed.train.lr_wsd_decay_style, "sqrt");
  EXPECT_EQ(resumed.train.min_lr_ratio, 0.3333333333333333);
  EXPECT_EQ(resumed.train.grad_clip, 0.5);
  EXPECT_EQ(kept_settings(resumed.train), recorded);
  EXPECT_EQ(recorded_setting(recorded, "precision"), "bf16");
  EXPECT_EQ(recorded_setting("", "precision"), std::nullopt);  // an older checkpoint
}

TEST(KeptSettings, GivenValuesStandAndThoseThatDifferAreNamed) {
  const std::string recorded = kept_settings(parse({"--lr", "0.001", "--beta1", "0.8"}).train);
  Options resumed = parse({"--lr", "0.002", "--beta1", "0.8", "--momentum", "0.5"});
  EXPECT_EQ(take_kept_settings(resumed, recorded),
            "lr 0.002 (the checkpoint's run: 0.001), momentum 0.5 (the checkpoint's run: 0.9)");
  EXPECT_EQ(resumed.train.lr, 0.002);
  EXPECT_EQ(resumed.train.momentum, 0.5);
}

TEST(KeptSettings, ALineThisBuildCannotReadIsRefused) {
  Options o = parse({});
  for (const auto& [recorded, expected] :
       {std::pair<std::string, std::string>{"dropout = 0.1\n",
                                            "records the setting 'dropout', which this build "
                                            "does not know"},
        {"lr: 0.1\n", "hold 'lr: 0.1', not a 'name = value' line"},
        {"beta1 = high\n", "setting beta1 = 'high' is not a value of it"},
        {"warmup-steps = -5\n", "setting warmup-steps = -5 lies outside >= 0"},
        {"lr = 1e30\n", "setting lr = 1e30 lies outside (0, 10]"}}) {
    try {
      take_kept_settings(o, recorded);
      ADD_FAILURE() << recorded;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  }
}

// An MoE run's aux-loss form is the objective's: a resume keeps the recorded one, and an MoE
// checkpoint of a build before the form was kept (settings without it, or none) trained per
// layer, which it keeps too, where an --init-from Hugging Face model would make auto all-layers.
TEST(KeptSettings, AnMoeRunsAuxLossFormIsKept) {
  CheckpointManifest m;
  m.global_batch_size = 8;
  m.micro_batch_size = 2;
  m.moe_aux_loss_coef = 0.01;  // an MoE run's
  auto resumed_form = [&](const std::vector<std::string>& given) {
    Options o = parse(given);
    take_checkpoint_settings(o, m, "ckpt", 1);
    return o.train.moe_aux_loss_form;
  };
  const std::string all_layers = kept_settings(parse({"--moe-aux-loss-form", "all-layers"}).train);
  m.settings = all_layers;
  EXPECT_EQ(resumed_form({}), "all-layers");
  EXPECT_EQ(resumed_form({"--moe-aux-loss-form", "per-layer"}), "per-layer");
  m.settings = all_layers.substr(0, all_layers.find("moe-aux-loss-form"));  // stop 62's settings
  ASSERT_NE(m.settings, all_layers);
  EXPECT_EQ(resumed_form({}), "per-layer");
  m.settings = "";  // older still
  EXPECT_EQ(resumed_form({}), "per-layer");
  EXPECT_EQ(resumed_form({"--moe-aux-loss-form", "all-layers"}), "all-layers");
  m.moe_aux_loss_coef = -1;  // a dense run's
  EXPECT_EQ(resumed_form({}), "auto");
}

// Document masking, positions and the boundary's loss mask are the objective's too: a resume
// keeps them unless given,
// names a given other value, and refuses a recorded value that is not a boolean; an older
// checkpoint's run had none.
TEST(KeptSettings, DocumentMaskingAndTheBoundarysLossMaskAreKept) {
  const std::string recorded = kept_settings(
      parse({"--document-mask", "--document-positions", "--mask-boundary-loss"}).train);
  EXPECT_EQ(recorded_setting(recorded, "document-mask"), "true");
  Options resumed = parse({});
  EXPECT_EQ(take_kept_settings(resumed, recorded), "");
  EXPECT_TRUE(resumed.train.document_mask);
  EXPECT_TRUE(resumed.train.document_positions);
  EXPECT_TRUE(resumed.train.mask_boundary_loss);
  Options unmasked = parse({"--document-mask", "false"});
  EXPECT_EQ(take_kept_settings(unmasked, recorded),
            "document-mask false (the checkpoint's run: true)");
  EXPECT_FALSE(unmasked.train.document_mask);
  Options older = parse({});
  take_kept_settings(older, "lr = 0.001\n");
  EXPECT_FALSE(older.train.document_mask);
  try {
    take_kept_settings(older, "document-mask = yes\n");
    ADD_FAILURE() << "no refusal";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("setting document-mask = 'yes' is not a value of it"),
              std::string::npos)
        << e.what();
  }
}
