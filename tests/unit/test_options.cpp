// Options: defaults, INI file with flags overriding it, and one clear UsageError for bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mpitrain/app/options.hpp"
#include "mpitrain/runtime/build_id.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

namespace {

Options parse(std::vector<std::string> args) {
  args.insert(args.begin(), "trainer");
  std::vector<const char*> argv;
  for (auto& a : args) argv.push_back(a.c_str());
  return parse_options(static_cast<int>(argv.size()), argv.data());
}

std::string usage_error(std::vector<std::string> args) {
  try {
    parse(std::move(args));
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

// The text with each run of white space (line breaks, indentation) as one space.
std::string flattened(const std::string& text) {
  std::istringstream words(text);
  std::string out, word;
  while (words >> word) out += (out.empty() ? "" : " ") + word;
  return out;
}

}  // namespace

TEST(Options, DefaultsAndFlags) {
  Options o = parse({"--train-data", "x.h5", "--steps", "7", "--arch", "llama", "--overwrite"});
  EXPECT_EQ(o.train.steps, 7);
  EXPECT_EQ(o.model.arch, Arch::Llama);
  EXPECT_TRUE(o.train.overwrite);
  EXPECT_TRUE(o.train.shuffle);
  EXPECT_EQ(o.model.vocab_size, 0);  // resolved later from the data
  EXPECT_EQ(o.given, (std::vector<std::string>{"arch", "overwrite", "steps", "train-data"}));
  EXPECT_NE(o.effective.find("steps = 7"), std::string::npos);
}

TEST(Options, TheLastOfARepeatedFlagWins) {
  Options o = parse({"--train-data", "x.h5", "--steps", "7", "--lr", "0.1", "--steps", "9"});
  EXPECT_EQ(o.train.steps, 9);
  EXPECT_DOUBLE_EQ(o.train.lr, 0.1);
}

// A word that belongs to no option is refused, not dropped (where does "banana" go?).
TEST(Options, AStrayWordIsRefused) {
  const std::string stray = usage_error({"--train-data", "a.h5", "banana", "--steps", "3"});
  EXPECT_NE(stray.find("unexpected argument 'banana'"), std::string::npos) << stray;
}

// A second --train-data is a list meant, not an override: refused, naming the list syntax.
TEST(Options, DataGivenTwiceIsRefused) {
  for (const char* name : {"--train-data", "--val-data"}) {
    const std::string twice = usage_error({"--train-data", "a.h5", name, "b.h5", name, "c.h5"});
    EXPECT_NE(twice.find(std::string(name) + " is given twice; give a list instead"),
              std::string::npos)
        << twice;
  }
  const std::string path = testing::TempDir() + "/options_data.ini";
  std::ofstream(path) << "train-data = 0.7:web/*.bin, 0.3:code.h5\n";
  EXPECT_EQ(parse({"--config", path}).train.train_data, "0.7:web/*.bin, 0.3:code.h5");
  EXPECT_EQ(parse({"--config", path, "--train-data", "b.h5"}).train.train_data, "b.h5");
  std::remove(path.c_str());
}

TEST(Options, FlagsOverrideTheIniFile) {
  const std::string path = testing::TempDir() + "/options_test.ini";
  {
    std::ofstream f(path);
    f << "# comment\nsteps = 11\nlr = 0.5\nn-layer = 3\nshuffle = false\ntrain-data = a.h5\n";
  }
  Options o = parse({"--config", path, "--lr", "0.25"});
  EXPECT_EQ(o.train.steps, 11);
  EXPECT_DOUBLE_EQ(o.train.lr, 0.25);
  EXPECT_EQ(o.model.n_layer, 3);
  EXPECT_FALSE(o.train.shuffle);
  EXPECT_EQ(o.train.train_data, "a.h5");
  std::remove(path.c_str());
}

TEST(Options, HelpListsEveryOptionWithDefault) {
  const std::string help = parse({"--help"}).print_instead;
  for (const char* name : {"--config",
                           "--out-dir",
                           "--steps",
                           "--global-batch-size",
                           "--micro-batch-size",
                           "--seq-len",
                           "--lr",
                           "--lr-schedule",
                           "--warmup-steps",
                           "--weight-decay",
                           "--grad-clip",
                           "--seed",
                           "--shuffle",
                           "--train-data",
                           "--val-data",
                           "--init-from",
                           "--eval-interval",
                           "--threads",
                           "--overwrite",
                           "--arch",
                           "--n-layer",
                           "--n-head",
                           "--n-kv-head",
                           "--d-model",
                           "--d-ff",
                           "--vocab-size"})
    EXPECT_NE(help.find(name), std::string::npos) << name;
  EXPECT_NE(help.find("(default: 100)"), std::string::npos);  // defaults are shown
}

TEST(Options, HelpShowsEveryOptionOnceUnderItsGroup) {
  const std::string help = parse({"--help"}).print_instead;
  std::istringstream effective(parse({"--train-data", "x.h5"}).effective);
  std::vector<std::string> names = {"help", "version", "config"};
  for (std::string line; std::getline(effective, line);)
    names.push_back(line.substr(0, line.find(' ')));
  size_t option_lines = 0;
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) option_lines += line.rfind("  -", 0) == 0;
  EXPECT_EQ(option_lines, names.size());
  for (const std::string& name : names) {
    const std::string start = (name == "help" ? "\n  -h, --" : "\n  --") + name;
    size_t count = 0;
    for (size_t at = help.find(start); at != std::string::npos; at = help.find(start, at + 1))
      count += help[at + start.size()] == ' ' || help[at + start.size()] == '\n';
    EXPECT_EQ(count, 1u) << name;
  }
  for (const char* group :
       {"\nModel:\n", "\nData and evaluation:\n", "\nTraining:\n", "\nParallelism:\n",
        "\nPrecision and memory:\n", "\nCheckpoints and exports:\n",
        "\nMonitoring and failure detection:\n", "\nDevice:\n"})
    EXPECT_NE(help.find(group), std::string::npos) << group;
}

TEST(Options, HelpReadsAsAUserWritesOptions) {
  const std::string help = parse({"--help"}).print_instead;
  EXPECT_EQ(help.find("[=arg"), std::string::npos);
  EXPECT_EQ(help.find("arg (="), std::string::npos);
  EXPECT_NE(help.find("\n  --overwrite  "), std::string::npos);
  EXPECT_NE(help.find("(default: 1e-05)"), std::string::npos);  // norm-eps, a float
  EXPECT_NE(help.find("(default: 0.95)"), std::string::npos);   // beta2, a double
  EXPECT_EQ(help.find("0.9000"), std::string::npos);
  EXPECT_EQ(help.find("\n:\n"), std::string::npos);  // Boost's stray caption line
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) EXPECT_LE(line.size(), 100u) << line;
  // No word split: a long description reads whole once the line breaks are spaces again.
  EXPECT_NE(flattened(help).find(
                "seconds a communication call may block once the first step has finished; "
                "then every rank that sees it reports the call and which ranks did not "
                "arrive, and the job exits 3; 0 = no limit; range >= 0 (default: 100)"),
            std::string::npos);
}

TEST(Options, VersionPrintsTheVersionAndBuild) {
  const std::string text = parse({"--version"}).print_instead;
  EXPECT_EQ(text.rfind(std::string("trainer ") + build_id() + "\n", 0), 0u) << text;
  // README: "--version prints the version and build": every library, on or off, a line each.
  for (const char* line : {"\n  compiler ", "\n  CUDA ", "\n  cuDNN ", "\n  NCCL ", "\n  MPI ",
                           "\n  HDF5 ", "\n  BLAS ", "\n  oneDNN "})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in\n" << text;
#ifdef MPITRAIN_HAVE_CUDA
  EXPECT_NE(text.find("\n  CUDA       on: runtime "), std::string::npos) << text;
#else
  EXPECT_NE(text.find("\n  CUDA       off ("), std::string::npos) << text;
#endif
  EXPECT_NE(text.find("OpenBLAS"), std::string::npos) << text;
  EXPECT_NE(text.find("parallel)"), std::string::npos) << text;  // HDF5: the build needs it
}

TEST(Options, AnUnknownOptionNamesTheNearest) {
  EXPECT_NE(usage_error({"--train-data", "x", "--stpes", "3"})
                .find("unrecognised option '--stpes' (did you mean --steps?)"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--n_layer", "3"}).find("did you mean --n-layer?"),
            std::string::npos);
  EXPECT_EQ(usage_error({"--train-data", "x", "--bogus", "1"}).find("did you mean"),
            std::string::npos);
  // A prefix is not taken for the option it begins (Boost's default would guess it).
  EXPECT_NE(usage_error({"--train-data", "x", "--lr-schedul", "linear"})
                .find("unrecognised option '--lr-schedul' (did you mean --lr-schedule?)"),
            std::string::npos);
  const std::string path = testing::TempDir() + "/options_typo.ini";
  std::ofstream(path) << "train-data = a.h5\nlr-schedul = linear\n";
  const std::string in_file = usage_error({"--config", path});
  EXPECT_NE(in_file.find("config " + path +
                         ": unrecognised option 'lr-schedul' (did you mean "
                         "lr-schedule?)"),
            std::string::npos)
      << in_file;
  std::remove(path.c_str());
}

// The names nanoGPT, Hugging Face, Megatron-LM and torchtitan users type name ours, flag or
// INI line alike (an edit distance cannot see --learning-rate in --lr).
TEST(Options, AnotherTrainersNameNamesOurs) {
  const std::vector<std::pair<std::string, std::string>> meant = {
      {"--learning-rate", "--lr?"},
      {"--max-iters", "--steps?"},
      {"--max_steps", "--steps?"},
      {"--train-iters", "--steps?"},
      {"--batch-size",
       "--micro-batch-size or --global-batch-size? sequences per rank and forward, or per step "
       "over all ranks"},
      {"--per_device_train_batch_size", "--micro-batch-size?"},
      {"--gradient-accumulation-steps",
       "--global-batch-size? it is micro-batch-size x accumulation steps x dp"},
      {"--lr-warmup-iters", "--warmup-steps?"},
      {"--warmup_iters", "--warmup-steps?"},
      {"--lr-decay-iters", "--lr-decay-steps?"},
      {"--save-steps", "--save-interval?"},
      {"--output_dir", "--out-dir?"},
      {"--seq-length", "--seq-len?"},
      {"--block_size", "--seq-len?"},
      {"--num-layers", "--n-layer?"},
      {"--hidden-size", "--d-model?"},
      {"--n_embd", "--d-model?"},
      {"--num-attention-heads", "--n-head?"},
      {"--micro_batch_size", "--micro-batch-size?"},  // the '_' form: by edit distance already
      {"--weight_decay", "--weight-decay?"},
      {"--bf16", "--precision? write --precision bf16"},
      {"--tensor-model-parallel-size", "--tp?"},
      {"--reset-attention-mask", "--document-mask?"},
      {"--reset_position_ids", "--document-positions?"},
      {"--eod-mask-loss", "--mask-boundary-loss?"},
  };
  for (const auto& [given, ours] : meant) {
    const std::string error = usage_error({"--train-data", "x", given, "1"});
    EXPECT_NE(error.find("unrecognised option '" + given + "' (did you mean " + ours + ")"),
              std::string::npos)
        << error;
  }
  const std::string path = testing::TempDir() + "/options_foreign.ini";
  std::ofstream(path) << "train-data = a.h5\nlearning_rate = 3e-4\n";
  const std::string in_file = usage_error({"--config", path});
  EXPECT_NE(in_file.find("unrecognised option 'learning_rate' (did you mean lr?)"),
            std::string::npos)
      << in_file;
  std::remove(path.c_str());
}

// Evaluating a model (--steps 0) from a checkpoint or --init-from needs no training data;
// training does, and so does --steps 0 with nothing to evaluate.
TEST(Options, EvaluatingAModelNeedsNoTrainingData) {
  EXPECT_EQ(usage_error({"--init-from", "gpt2-hf", "--steps", "0", "--val-data", "v.h5"}), "");
  EXPECT_EQ(usage_error({"--resume", "runs/a", "--steps", "0", "--val-data", "v.h5"}), "");
  EXPECT_NE(usage_error({"--init-from", "gpt2-hf", "--steps", "5"})
                .find("no training data: set train-data"),
            std::string::npos);
  EXPECT_NE(usage_error({"--steps", "0", "--val-data", "v.h5"})
                .find("or --resume a checkpoint or --init-from a model to evaluate"),
            std::string::npos);
  EXPECT_NE(usage_error({"--resume", "auto", "--steps", "0"}).find("no training data"),
            std::string::npos);
}

TEST(Options, BadInputIsOneClearUsageError) {
  EXPECT_NE(usage_error({"--train-data", "x", "--steps", "abc"}).find("steps"), std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--no-such-option", "1"}).find("no-such-option"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--steps", "-1"}).find("steps must be >= 0 (got -1)"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--arch", "bert"}).find("arch"), std::string::npos);
  EXPECT_NE(usage_error({}).find("train-data"), std::string::npos);
  EXPECT_NE(usage_error({"--config", "/nonexistent/run.ini"}).find("/nonexistent/run.ini"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--data-format", "csv"}).find("data-format"),
            std::string::npos);
  EXPECT_NE(usage_error({"--train-data", "x", "--async-save", "1"})
                .find("async-save must be auto, true or false, not '1'"),
            std::string::npos);
  // --async-save: auto by default, alone true
  EXPECT_EQ(parse({"--train-data", "x"}).train.async_save, "auto");
  EXPECT_EQ(parse({"--train-data", "x", "--async-save"}).train.async_save, "true");
  // the seed is unsigned: a sign or a value past 2^64 - 1 is refused, never wrapped
  for (const char* seed : {"-1", "18446744073709551616", "+5", "1e3", ""})
    EXPECT_NE(usage_error({"--train-data", "x", "--seed", seed})
                  .find("seed must be an integer from 0 to 18446744073709551615 (got '" +
                        std::string(seed) + "')"),
              std::string::npos)
        << seed;
  EXPECT_EQ(parse({"--train-data", "x", "--seed", "18446744073709551615"}).train.seed, UINT64_MAX);
}

// An option the user set that the run would not use is refused, never dropped: a decay that
// cannot start, a stop after the last step.
TEST(Options, OptionsTheRunWouldNotUseAreRefused) {
  const auto refused = [](std::vector<std::string> extra, const std::string& text) {
    std::vector<std::string> args = {"--train-data", "x", "--steps", "4"};
    args.insert(args.end(), extra.begin(), extra.end());
    const std::string e = usage_error(args);
    EXPECT_NE(e.find(text), std::string::npos) << "got: '" << e << "'";
  };
  refused({"--warmup-steps", "5", "--lr-schedule", "linear"},
          "lr-schedule shapes the decay after the warm-up, and warmup-steps 5 covers the whole "
          "run (steps 4)");
  refused({"--warmup-steps", "4", "--min-lr-ratio", "0.5"}, "min-lr-ratio shapes the decay");
  refused({"--warmup-steps", "3", "--lr-decay-steps", "2"},
          "lr-decay-steps 2 must exceed warmup-steps 3");
  refused({"--lr-schedule", "constant", "--min-lr-ratio", "0"},
          "min-lr-ratio sets the decay, and lr-schedule constant has none");
  refused({"--lr-schedule", "constant", "--lr-decay-steps", "9"}, "lr-decay-steps sets the decay");
  refused({"--exit-at-step", "5"}, "exit-at-step 5 comes after the run's last step (4)");
  refused({"--sample-temperature", "0", "--sample-top-k", "5"},
          "sample-top-k chooses the tokens to sample among, and sample-temperature 0 takes the "
          "most likely one");
  refused({"--sample-temperature", "0", "--sample-top-p", "0.9"}, "sample-top-p chooses");
  refused({"--eval-interval", "10"},
          "eval-interval sets up the evaluation on --val-data, and none is given");
  refused({"--eval-samples", "8"}, "eval-samples sets up the evaluation");
  refused({"--sample-tokens", "0", "--sample-prompt", "Hi"},
          "sample-prompt shapes the text sample, and sample-tokens is 0 (none)");
  refused({"--sample-tokens", "0", "--sample-top-k", "3"}, "sample-top-k shapes the text sample");
  refused({"--kernels", "cuda"},
          "kernels sets up the GPU backend, and this run is --device cpu: give --device cuda");
  refused({"--tf32"}, "tf32 sets up the GPU backend");
  refused({"--gpu-workspace-mb", "512"}, "gpu-workspace-mb sets up the GPU backend");
  // What the run uses is accepted: a warm-up shorter than the run, a constant schedule, a resume
  // (its schedule may be the checkpoint's), a stop within the run, and the defaults, set or not
  // (a warm-up of 10 over 4 steps; run.ini, which repeats a run as --config, sets every option).
  for (const std::vector<std::string>& ok :
       {std::vector<std::string>{"--warmup-steps", "3", "--lr-schedule", "linear"},
        {"--warmup-steps", "3", "--lr-decay-steps", "4", "--min-lr-ratio", "0"},
        {"--warmup-steps", "5", "--lr-schedule", "constant"},
        {"--warmup-steps", "5", "--lr-schedule", "linear", "--resume", "auto"},
        {"--exit-at-step", "4"},
        {"--lr-schedule", "cosine", "--min-lr-ratio", "0.1", "--lr-decay-steps", "0"},
        {"--sample-temperature", "0", "--sample-top-k", "0", "--sample-top-p", "1"},
        {"--sample-temperature", "0.5", "--sample-top-k", "5", "--sample-top-p", "0.9"},
        {"--kernels", "cudnn", "--tf32", "false", "--gpu-workspace-mb", "1024"},
        {"--val-data", "v", "--eval-interval", "10", "--eval-samples", "8"},
        {"--sample-tokens", "0", "--sample-temperature", "0.8", "--sample-prompt", ""},
        {"--eval-interval", "50", "--eval-samples", "64"},
        {"--eval-interval", "0"},
#ifdef MPITRAIN_HAVE_CUDA
        {"--device", "cuda", "--kernels", "cuda", "--tf32", "--gpu-workspace-mb", "512"},
#endif
        {}}) {
    std::vector<std::string> args = {"--train-data", "x", "--steps", "4"};
    args.insert(args.end(), ok.begin(), ok.end());
    EXPECT_EQ(usage_error(args), "");
  }
}

TEST(Options, HugePagesAreOnOrOffAndOffIsTheCpusAlone) {
  EXPECT_TRUE(parse({"--train-data", "x"}).train.huge_pages);
  EXPECT_FALSE(parse({"--train-data", "x", "--huge-pages", "off"}).train.huge_pages);
  EXPECT_FALSE(parse({"--train-data", "x", "--huge-pages", "false"}).train.huge_pages);
  EXPECT_NE(usage_error({"--train-data", "x", "--huge-pages", "maybe"}).find("huge-pages"),
            std::string::npos);
#ifdef MPITRAIN_HAVE_CUDA
  EXPECT_NE(usage_error({"--train-data", "x", "--device", "cuda", "--huge-pages", "off"})
                .find("--huge-pages false is for the CPU backend's tensors"),
            std::string::npos);
#endif
}

TEST(ModelConfig, ValidateNamesTheInconsistency) {
  ModelConfig c;
  c.d_model = 130;
  c.n_head = 4;
  try {
    c.validate();
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("d-model (130)"), std::string::npos);
  }
  c.d_model = 128;
  c.n_kv_head = 3;
  EXPECT_THROW(c.validate(), UsageError);
}

// The model's switches: auto keeps the arch's defaults, a given value overrides them (alone:
// true), qkv-bias after attention-bias; anything else is refused naming the switch.
TEST(Options, ModelSwitchesStartFromTheArchsDefaults) {
  const ModelConfig llama = parse({"--train-data", "x.h5", "--arch", "llama"}).model;
  EXPECT_FALSE(llama.tie_embeddings || llama.qkv_bias || llama.proj_bias || llama.mlp_bias);
  const ModelConfig gpt2 = parse({"--train-data", "x.h5", "--tie-embeddings=false"}).model;
  EXPECT_FALSE(gpt2.tie_embeddings);
  EXPECT_TRUE(gpt2.qkv_bias && gpt2.proj_bias && gpt2.mlp_bias);
  const ModelConfig qwen2 =
      parse({"--train-data", "x.h5", "--arch", "llama", "--attention-bias", "--qkv-bias=false",
             "--qkv-bias", "--attention-bias=false", "--tie-embeddings", "--head-dim", "64"})
          .model;
  EXPECT_TRUE(qwen2.tie_embeddings && qwen2.qkv_bias && !qwen2.proj_bias && !qwen2.mlp_bias);
  EXPECT_EQ(qwen2.head_dim, 64);
  EXPECT_EQ(usage_error({"--train-data", "x.h5", "--mlp-bias=yes"}),
            "mlp-bias must be auto, true or false (got 'yes')");
}
