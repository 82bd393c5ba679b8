// The Trainer's run: resume, the step loop, evaluation, checkpoints, the end. Set-up is in
// trainer_setup.cpp.
#include "mpitrain/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/data/loss_mask.hpp"
#include "mpitrain/io/out_file.hpp"
#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/model/hf_model.hpp"
#include "mpitrain/model/llmc_model.hpp"
#include "mpitrain/model/safetensors.hpp"
#include "mpitrain/monitor/memory.hpp"
#include "mpitrain/monitor/output_dir.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/train/gather.hpp"
#include "mpitrain/train/generate.hpp"
#include "mpitrain/train/kept_settings.hpp"
#include "mpitrain/train/moe_metrics.hpp"
#include "mpitrain/train/replica_check.hpp"

namespace mpitrain {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int Trainer::run() {
  stop_if_requested(signals_, world_, "the last of the set-up");
  run_start_ = std::chrono::steady_clock::now();
  log_->set_up_done();
  trace_.start(comms_->world);  // the timelines' common zero
  for (int step = start_step_; step < t_.steps; ++step) {
    if (const StepEnd end = this->step(step); end.stop) return finish(end.exit_code);
    after_evaluation(step);
    if (const StepEnd end = stop_or_save(step); end.stop) return finish(end.exit_code);
  }
  if (val_windows_ && t_.steps == 0) log_->eval(start_step_, evaluate());  // evaluation only
  finish(kExitOk);
  return export_and_sample();
}

// A committed checkpoint of checkpoints directory `dir` newer than the one `latest` leads to
// (best/, or a save cut short before `latest` named it), when there is one and it loads; said on
// rank 0. Every rank finds the same one; a load failing (agreed) falls back to `latest`.
std::optional<CheckpointManifest> Trainer::load_newer_than_latest(const std::string& dir,
                                                                  const CheckpointState& target) {
  const std::optional<NewerCheckpoint> newer = newer_than_latest(dir);
  if (!newer) return std::nullopt;
  if (root_) std::printf("resume: %s: resuming from it\n", newer->note(dir).c_str());
  try {
    return CheckpointStore(dir, world_).load(newer->dir, target);
  } catch (const UsageError& e) {
    if (root_) std::fprintf(stderr, "checkpoint: %s; trying the one latest leads to\n", e.what());
    return std::nullopt;
  }
}

void Trainer::resume() {
  if (t_.resume.empty()) return;
  std::optional<CheckpointManifest> m;
  // A device's state loads through host copies of what this rank holds, freed at the end.
  std::optional<CheckpointMirror> mirror;
  if (mirrored_) {
    const size_t floats = mirror_floats(*state_, MirrorUse::Load);
    const NodeMemory memory = node_memory(floats, *node_, world_);
    require(memory.fits(), "--resume: loading onto the device goes through host copies of what "
                           "each rank holds, " + memory.text() +
                               ": run on more nodes, or with fewer ranks on each");
    if (root_)
      std::printf("resume: through host copies, %s (rank 0: %zu floats), freed once loaded\n",
                  memory.text().c_str(), floats);
    all_or_none(world_, [&] { mirror.emplace(*backend_, *state_, held_params_, MirrorUse::Load); });
  }
  CheckpointState& target = mirror ? mirror->host() : *state_;
  // A 2-byte compute copy on the host loads through fp32 values, converted once read.
  std::vector<float> load_params;
  if (target.params == nullptr) {
    load_params.resize(target.params_held.size());
    target.params = load_params.data();
  }
  all_or_none(world_, [&] {
    // The store refuses a checkpoint of another model (UsageError naming the difference), and
    // a fresh start over checkpoints that are all damaged unless --overwrite.
    const bool one = t_.resume != "auto" && !resume_source_->step.empty();
    const std::string dir = t_.resume == "auto" ? store_->dir() : resume_source_->checkpoints;
    if (!one) m = load_newer_than_latest(dir, target);
    if (m) return;
    if (t_.resume == "auto")
      m = store_->load_latest(target, t_.overwrite);
    else if (one)
      m = store_->load(resume_source_->step, target);
    else  // the newest valid checkpoint of another directory (find_resume_source saw one)
      m = CheckpointStore(dir, world_).load_latest(target);
  });
  if (!load_params.empty()) {  // the whole stage, or under ZeRO-3 the owned pieces
    if (m)
      backend_->upload(held_params_, load_params.data(), load_params.size());
    target.params = nullptr;
  }
  if (!m) {
    require(t_.resume == "auto", "--resume " + t_.resume + ": no valid checkpoint in it");
    if (params_from_checkpoint_)  // load_latest_loads_or_stops said this cannot happen
      MPITRAIN_THROW("no checkpoint was loaded, yet the initial values were left out for one");
    if (root_) std::printf("no checkpoint to resume from: starting fresh\n");
    return;
  }
  // Another seed would silently change the data order from here on.
  const std::string checkpoint = "the checkpoint of step " + std::to_string(m->step);
  require(m->seed == t_.seed || t_.allow_seed_change,
          checkpoint + " was written with seed " + std::to_string(m->seed) +
              ", this run has seed " + std::to_string(t_.seed) + ": pass --seed " +
              std::to_string(m->seed) +
              " to continue its data order, or --allow-seed-change to take the new seed");
  // So would other samples, another order of them, or other files, counts or weights (no
  // training data: --steps 0, nothing to continue; the order and files: recorded since their
  // fields). Each is refused alike, unless --allow-data-change.
  const auto require_same_data = [&](bool same, const std::string& what) {
    require(!train_ || same || t_.allow_data_change, checkpoint + what);
  };
  require_same_data(m->seq_len == t_.seq_len,
                    " was trained on samples of seq-len " + std::to_string(m->seq_len) +
                        ", this run's are " + std::to_string(t_.seq_len) +
                        ": leave --seq-len out to continue its data order, or "
                        "--allow-data-change to go on with the new samples (a longer context)");
  const std::string shuffle = t_.shuffle ? "true" : "false";
  require_same_data(m->shuffle.empty() || m->shuffle == shuffle,
                    " was written with --shuffle " + m->shuffle + ", this run has --shuffle " +
                        shuffle +
                        ": leave it out to continue its data order, or "
                        "--allow-data-change to take the new order");
  const std::string data_change =
      m->data.empty() || !train_ ? "" : data_differences(m->data, train_->record());
  require_same_data(data_change.empty(), " was trained on other data (" + data_change +
                                             "): give its data, or --allow-data-change to go "
                                             "on with these");
  if (mirror) mirror->upload();
  start_step_ = static_cast<int>(m->step);
  consumed_ = m->consumed_samples;
  best_val_ = m->val_loss;
  optimizer_->set_steps_taken(static_cast<int>(m->adam_steps));
  model_->expert_bias() = m->expert_bias;  // read_manifest: the model's table, or none
  // The loss scale is an fp16 run's: from another precision's checkpoint (recorded; an older
  // file's scale of 1: none was kept) an fp16 run starts at --initial-loss-scale.
  const std::optional<std::string> precision = recorded_setting(m->settings, "precision");
  const bool scaled = precision ? *precision == "fp16" : m->loss_scale != 1.0;
  scaler_->restore(scaled ? m->loss_scale : t_.initial_loss_scale,
                   scaled ? m->loss_scale_clean_steps : 0, m->skipped_steps);
  if (!scaled && t_.precision == "fp16" && root_)
    std::printf(
        "resume: the checkpoint's run kept no loss scale (precision %s): fp16 starts at "
        "--initial-loss-scale %s\n",
        precision.value_or("fp32").c_str(), shortest_text(t_.initial_loss_scale).c_str());
  // The schedule keeps the length it started with, whatever this run's --steps.
  const std::string schedule_note =
      resume_schedule(*lr_schedule_, t_.lr_decay_steps, t_.steps, m->lr_decay_steps, m->step);
  if (root_)
    std::printf("resumed from step %d (%llu samples consumed, written by %s at %s)\n", start_step_,
                static_cast<unsigned long long>(consumed_), m->build_id.c_str(),
                m->wall_time.c_str());
  if (root_ && !schedule_note.empty() && t_.steps > start_step_)
    std::printf("%s\n", schedule_note.c_str());
}

// Forward and backward over the micro-batches (PipelineRunner), the gradient sync, clipping and
// the optimizer (UpdateStep), the replica check, and the step's metrics record.
Trainer::StepEnd Trainer::step(int step) {
  TraceScope step_region(&trace_, TraceLane::Compute, "step", nullptr, step + 1);
  const auto start = std::chrono::steady_clock::now();
  std::optional<double> energy_start;  // this GPU's meter, where this rank reads one
  if (devices_.power) energy_start = devices_.power->energy_joules();
  watchdog_->step_started(step + 1);
  faults_.at("step", world_.rank(), step + 1);  // MPITRAIN_FAULT=hang / kill:phase=step
  for (Communicator* c : blocking_) c->reset_blocked_seconds();
  if (op_profile_) op_profile_->begin_step(step != start_step_);  // the first: the warm-up
  for (Communicator* c : comms_->dp_groups())
    if (c) c->reset_bytes_sent();
  sync_->zero_grads();
  runner_->load(load_);
  const bool counts_loss = grid_->last_stage() && grid_->tp_rank() == 0;
  // The loss is the mean over the step's scored targets: all its tokens but under a loss mask,
  // whose count over every rank is summed first (data/loss_mask.hpp). The MoE losses keep their
  // weight per token. A step with no scored target has a zero cross-entropy gradient whatever
  // its weight (every row unscored; a weight of 0 would mean no gradient written at all), and
  // logs its loss, the mean of nothing, as nan.
  double scored = tokens_per_step_;
  if (loss_masked_) {
    scored = counts_loss ? static_cast<double>(runner_->scored()) : 0.0;
    comms_->world.all_reduce(&scored, 1, ReduceOp::Sum);
  }
  const auto per = [&](double n) {  // the loss gradient per one of n, x the loss scale
    return static_cast<float>(static_cast<float>(1.0 / n) * scaler_->scale());
  };
  const double loss =
      runner_->train({per(std::max(scored, 1.0)), per(tokens_per_step_)}, grads_ready_);
  // MoE: the routing and aux/z losses of this step's forwards, over all ranks (a collective).
  const std::vector<MoeLayerRecord> moe =
      cfg_.n_experts > 0 ? reduce_moe_stats(model_->take_moe_stats(), cfg_,
                                            grid_->tp_rank() == 0 && grid_->cp_rank() == 0,
                                            shape_.dp * micro_batches_, comms_->world)
                         : std::vector<MoeLayerRecord>{};
  if (cfg_.moe_expert_bias)  // aux-loss-free balancing: each MoE layer's bias by its loads
    for (size_t i = 0; i < moe.size(); ++i)
      update_expert_bias(model_->expert_bias().data() + i * cfg_.n_experts, moe[i].tokens,
                         static_cast<float>(t_.moe_expert_bias_rate));
  const double lr = lr_schedule_->at(step);
  const UpdateResult result = update_->apply(lr, counts_loss ? loss : 0.0, step + 1);
  if (result.verdict == StepVerdict::Stop) return {true, kExitFailure};
  const double optimizer_seconds = update_->optimizer_seconds();
  // Replica drift: every --check-replicas steps the data-parallel copies must be identical
  // (under expert parallelism the expert-dp ranks', which hold the same experts too).
  if (model_->params())  // ZeRO-3 holds no whole copy (and refuses --check-replicas)
    apply_drift_fault(faults_, model_->layout(), model_->params(), world_.rank(), step + 1);
  MpiCommunicator& replicas = comms_->expert_dp ? *comms_->expert_dp : comms_->dp;
  if (t_.check_replicas > 0 && (step + 1) % t_.check_replicas == 0 &&
      !replicas_agree(model_->layout(), host_params(), replicas, comms_->world, step + 1))
    return {true, kExitFailure};
  consumed_ += t_.global_batch_size;

  const double exposed_comm_seconds = blocked_seconds();
  const double seconds = seconds_since(start);
  if (op_profile_) op_profile_->end_step(seconds);
  const double tokens_per_s = tokens_per_step_ / seconds;
  // One world collective for the record's figures: the largest peak RSS and host scratch, all
  // GPUs' energy, and whether every meter read (a meter whose reading failed reads nothing from
  // then on).
  double totals[4] = {peak_rss_mib(), backend_->host_scratch_bytes() / 1048576.0, 0.0, 1.0};
  if (devices_.power) {
    const std::optional<double> energy_end = devices_.power->energy_joules();
    totals[2] = energy_start && energy_end ? *energy_end - *energy_start : 0.0;
    totals[3] = energy_start && energy_end ? 1.0 : 0.0;
  }
  const ReduceOp ops[4] = {ReduceOp::Max, ReduceOp::Max, ReduceOp::Sum, ReduceOp::Min};
  comms_->world.all_reduce_each(totals, ops, 4);
  const double rss = totals[0], scratch = totals[1];
  // Energy only where every GPU has a meter and every meter read.
  const double joules = devices_.power_everywhere && totals[3] > 0 ? totals[2] : -1.0;
  const PipelineRunner::Times& pass = runner_->times();
  checkpointer_->poll();  // a background save committed since: into this record
  log_->step({step + 1, t_.steps, scored > 0 ? result.loss_sum / scored : std::nan(""), lr,
              result.grad_norm, tokens_per_s, 1e3 * seconds, 1e3 * exposed_comm_seconds,
              flops_per_token_ * tokens_per_s / (peak_ * 1e9), 1e3 * pass.forward,
              1e3 * pass.backward, 1e3 * optimizer_seconds, 1e3 * pass.data, rss, scratch,
              comms_->dp_bytes_sent(), scaler_->scale(), update_->skipped_steps(), joules,
              consumed_ * static_cast<uint64_t>(t_.seq_len), moe, scored > 0});
  watchdog_->step_finished();
  slowest_step_ = std::max(slowest_step_, seconds);
  return {};
}

// Mean loss per scored token over the first --eval-samples validation windows; data-parallel
// rank r takes r, r+dp, ... and runs them through its pipeline in batches of up to the
// micro-batch.
double Trainer::evaluate() {
  const int dp = grid_->shape().dp;
  const uint64_t total = std::min<uint64_t>(t_.eval_samples, val_windows_->count());
  double sums[2] = {0.0, 0.0};  // loss, tokens
  uint64_t next = grid_->dp_rank();
  while (next < total) {
    int rows = 0;
    for (; rows < micro_batch_ && next < total; ++rows, next += dp)
      val_windows_->read(next, tokens_.data() + rows * t_.seq_len,
                         targets_.data() + rows * t_.seq_len);
    if (loss_boundary_)
      unscore_after_boundary(*loss_boundary_, tokens_.data(), targets_.data(),
                             static_cast<size_t>(rows) * t_.seq_len);
    const int32_t *tokens = tokens_.data(), *targets = targets_.data(), *starts = nullptr;
    if (documents_) {  // each window's documents, from its first position
      document_starts(tokens, rows, t_.seq_len, *documents_, doc_starts_.data());
      starts = doc_starts_.data();
    }
    if (chunks_) {  // this cp rank's two chunks of each window
      chunks_->take(tokens, local_tokens_.data(), rows);
      chunks_->take(targets, local_targets_.data(), rows);
      tokens = local_tokens_.data(), targets = local_targets_.data();
      if (documents_) {
        chunks_->take(doc_starts_.data(), local_doc_starts_.data(), rows);
        starts = local_doc_starts_.data();
      }
    }
    const double loss = runner_->evaluate(tokens, targets, starts, rows);
    if (grid_->last_stage() && grid_->tp_rank() == 0) {
      sums[0] += loss;
      sums[1] += static_cast<double>(runner_->scored());
    }
  }
  comms_->world.all_reduce(sums, 2, ReduceOp::Sum);
  model_->take_moe_stats();  // MoE: evaluation's routing is not the next step's
  return sums[1] > 0 ? sums[0] / sums[1] : std::nan("");  // none scored: the mean of nothing
}

// At --eval-interval and after the last step: the validation loss, and the best checkpoint.
void Trainer::after_evaluation(int step) {
  const bool last = step + 1 == t_.steps;
  if (!val_windows_ || !((t_.eval_interval > 0 && (step + 1) % t_.eval_interval == 0) || last))
    return;
  const double val = evaluate();
  log_->eval(step + 1, val);
  // saved also when best_val_ is NaN (none yet); never a nan (a diverged model, or windows that
  // score nothing)
  if (!t_.save_best || std::isnan(val) || val >= best_val_) return;
  best_val_ = val;
  checkpointer_->save(manifest(step + 1), "best");
}

// Stop requests (signals on any rank, --exit-at-step, the time limit) are agreed on here,
// between steps; the checkpoint at --save-interval, after the last step, or before a stop.
Trainer::StepEnd Trainer::stop_or_save(int step) {
  const bool last = step + 1 == t_.steps;
  const bool time_up =
      t_.exit_after_minutes > 0 &&
      seconds_since(run_start_) + 2 * slowest_step_ + 2 * checkpointer_->last_save_seconds() >=
          60 * t_.exit_after_minutes;
  // Each reason separately, so every rank (and the message) knows all of them.
  int64_t reasons[3] = {t_.exit_at_step > 0 && step + 1 == t_.exit_at_step, time_up,
                        signals_.requested()};
  comms_->world.all_reduce(reasons, 3, ReduceOp::Max);
  const bool stop = reasons[0] || reasons[1] || reasons[2];
  if ((t_.save_interval > 0 && ((step + 1) % t_.save_interval == 0 || last)) || stop)
    checkpointer_->save(manifest(step + 1));
  if (!stop || last) return {};
  checkpointer_->wait();  // exit 85 only once the checkpoint is committed
  if (root_)
    std::printf("stopping after step %d (%s): checkpoint saved; exit %d = requeue me\n", step + 1,
                reasons[0]   ? "exit-at-step"
                : reasons[1] ? "time limit"
                             : "signal",
                kExitRequeue);
  return {true, kExitRequeue};
}

int Trainer::finish(int exit_code) {
  checkpointer_->wait();
  log_->finish(report_path_, update_->skipped_steps(), exit_code);
  trace_.close();
  if (op_profile_ && root_) write_op_profile();
  return exit_code;
}

void Trainer::write_op_profile() const {
  char header[768];
  std::snprintf(header, sizeof header,
                "op profile of rank 0, %d thread(s), %d step(s) after the warm-up step; floors: "
                "sgemm %.1f GFLOP/s (%s), memory %.1f GB/s (a 128 MiB copy, read + written)",
                threads_, op_profile_->steps(), op_gemm_gflops_, peak_source_.c_str(),
                op_bandwidth_gbs_);
  const std::string table = op_profile_->table(header, op_gemm_gflops_, op_bandwidth_gbs_);
  std::printf("%s", table.c_str());
  const std::string path = (std::filesystem::path(t_.out_dir) / "op_profile.txt").string();
  OutFile file(path + ".tmp");
  file.write(table.data(), table.size());
  file.commit(path);
}

int Trainer::export_and_sample() {
  const bool want_full =
      !t_.export_llmc.empty() || !t_.export_params.empty() || !t_.export_hf.empty() ||
      t_.sample_tokens > 0;
  if (!want_full) return kExitOk;
  // ZeRO-3: the stage's units gathered first, on the host.
  const std::vector<float> stage =
      t_.zero == 3 ? sharded_->gather_whole(comms_->dp_shard(),
                                            comms_->expert_dp ? &*comms_->expert_dp : nullptr)
                   : std::vector<float>{};
  std::vector<float> full = gather_parameters(*model_, stage.empty() ? nullptr : stage.data(),
                                              *grid_, stage_first_layer_, world_);
  if (!root_) return kExitOk;
  for (const std::string* path : {&t_.export_llmc, &t_.export_params, &t_.export_hf})
    if (!path->empty()) create_parent_dirs(*path);  // checked at start-up: their room exists
  if (!t_.export_llmc.empty()) {
    save_llmc_model(t_.export_llmc, cfg_, *full_layout_, full.data(), LlmcDtype::Fp32);
    std::printf("exported the model to %s (llm.c format, fp32)\n", t_.export_llmc.c_str());
  }
  if (!t_.export_params.empty()) {
    write_parameters_hdf5(t_.export_params, cfg_, full);
    std::printf("wrote the parameters to %s\n", t_.export_params.c_str());
  }
  if (!t_.export_hf.empty()) {
    save_hf_model(t_.export_hf, cfg_, *full_layout_, full.data(), tokenizer_.get(),
                  parse_shard_size(t_.export_hf_shard_size, "export-hf-shard-size"),
                  HfRouterKeys{t_.moe_aux_loss_coef});
    std::printf("exported the model to %s (Hugging Face: config.json, %s)\n", t_.export_hf.c_str(),
                std::filesystem::exists(std::filesystem::path(t_.export_hf) / kSafetensorsIndex)
                    ? "model.safetensors.index.json and its shards"
                    : "model.safetensors");
    if (cfg_.n_experts > 0 && t_.moe_aux_loss_form == "per-layer")
      std::printf(
          "note: its router_aux_loss_coef %s weighted this run's per-layer load-balancing "
          "losses, summed (moe-aux-loss-form per-layer); transformers weights one loss "
          "over all %d MoE layers' routing by it\n",
          shortest_text(t_.moe_aux_loss_coef).c_str(), cfg_.moe_layers(0, cfg_.n_layer));
  }
  if (t_.sample_tokens > 0) {
    if (backend_->host_memory()) {
      print_sample(t_, cfg_, full, tokenizer_.get(), *backend_);
    } else {  // the device's memory is sealed: the sample runs on the CPU
      CpuBackend<float> cpu(threads_);
      print_sample(t_, cfg_, full, tokenizer_.get(), cpu);
    }
  }
  return kExitOk;
}

CheckpointManifest Trainer::manifest(int step) const {
  CheckpointManifest m;
  m.step = step;
  m.consumed_samples = consumed_;
  m.seed = t_.seed;
  m.adam_steps = optimizer_->steps_taken();
  m.loss_scale = scaler_->scale();
  m.loss_scale_clean_steps = scaler_->clean_steps();
  m.skipped_steps = update_->skipped_steps();
  m.val_loss = best_val_;
  m.model = cfg_;
  m.layout = shape_;
  m.pp_layers = t_.pp_layers;
  m.global_batch_size = t_.global_batch_size;
  m.micro_batch_size = micro_batch_;
  m.seq_len = t_.seq_len;
  m.data = train_ ? train_->record() : "";
  m.shuffle = t_.shuffle ? "true" : "false";
  m.settings = kept_settings(t_);
  m.lr_decay_steps = lr_schedule_->total_steps;
  if (cfg_.n_experts > 0) {
    m.moe_aux_loss_coef = t_.moe_aux_loss_coef;
    m.moe_z_loss_coef = t_.moe_z_loss_coef;
  }
  m.expert_bias = model_->expert_bias();
  return m;
}

const float* Trainer::host_params() {
  if (backend_->host_memory() && model_->params().full()) return model_->params().full();
  params_copy_.resize(model_->num_params());
  backend_->download(params_copy_.data(), model_->params(), params_copy_.size());
  return params_copy_.data();
}

double Trainer::blocked_seconds() const {
  double s = 0.0;
  for (Communicator* c : blocking_) s += c->blocked_seconds();
  return s;
}

int train(const Options& options, const MpiComm& world, const StopSignals& signals) {
  try {
    return Trainer(options, world, signals).run();
  } catch (const StopRequested& stop) {  // every rank alike, everything released
    if (world.rank() == 0) std::printf("%s\n", stop.what());
    return kExitRequeue;
  }
}

}  // namespace mpitrain
