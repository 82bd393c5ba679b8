#include "mpitrain/planner/inputs.hpp"

#include <vector>

#include "mpitrain/app/options.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

PlanInput read_plan_input(const std::string& config_path, const RunOverrides& over, bool gpu) {
  // The trainer insists on training data, and on validation data for a file's evaluation
  // settings; the planner reads neither.
  std::vector<std::string> args = {"plan",         "--config", config_path, "--train-data",
                                   "(none)",       "--val-data", "(none)"};
  auto add = [&](const char* flag, const std::string& value) {
    args.push_back(flag);
    args.push_back(value);
  };
  if (over.seq_len) add("--seq-len", std::to_string(over.seq_len));
  if (over.global_batch) add("--global-batch-size", std::to_string(over.global_batch));
  if (over.vocab_size) add("--vocab-size", std::to_string(over.vocab_size));
  if (!over.precision.empty()) add("--precision", over.precision);
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  const Options o = parse_options(static_cast<int>(argv.size()), argv.data());

  PlanInput in;
  ModelConfig& m = in.model;
  m = o.model;
  const TrainConfig& t = o.train;
  require(m.vocab_size > 0, config_path + " leaves vocab-size to the training data: pass --vocab-size");
  // Completed as train/model_setup.cpp does from the options.
  if (m.n_kv_head == 0) m.n_kv_head = m.n_head;
  if (m.d_ff == 0) m.d_ff = default_ffn_width(m.arch, m.d_model);
  if (m.max_seq_len == 0) m.max_seq_len = t.seq_len;
  m.validate();
  require(t.seq_len <= m.max_seq_len, "seq-len " + std::to_string(t.seq_len) +
                                          " exceeds the model's " + std::to_string(m.max_seq_len) +
                                          " positions (max-seq-len)");
  // A cp the file sets is the layout to plan (as --cp); left at its default, cp is searched.
  if (o.was_given("cp")) in.cp = t.cp;
  in.run = run_shape_of(t, gpu);
  return in;
}

RunShape run_shape_of(const TrainConfig& t, bool gpu) {
  RunShape run;
  run.seq_len = t.seq_len;
  run.global_batch = t.global_batch_size;
  run.precision = parse_precision(t.precision);
  run.schedule = parse_pipeline_schedule(t.pp_schedule);
  run.bucket_mb = t.bucket_mb;
  run.optimizer_states = static_cast<int>(state_names(parse_optimizer(t.optimizer)).size());
  run.gpu = gpu;
  return run;
}

}  // namespace mpitrain
