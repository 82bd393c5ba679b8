// A training run from options to trained model, as the step listing of docs/ARCHITECTURE.md:
//
//   Trainer trainer(options, world, signals);   set-up (trainer_setup.cpp): every check before
//                                      any work, the out-dir lock, then the grid, communicators,
//                                      backend, model, optimizer, resume; the out-dir written
//   trainer.run():                     for each step: step(), evaluate() at the interval,
//                                      a save at the interval or on a stop (Checkpointer,
//                                      in the background); finish(); export
//
// Each concern is a component the loop calls (PipelineRunner, UpdateStep, CheckpointStore,
// MetricsLog, Watchdog, ...); the Trainer only owns them and says when.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpitrain/app/options.hpp"
#include "mpitrain/backend/backend.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/ckpt/resume_source.hpp"
#include "mpitrain/data/dataset.hpp"
#include "mpitrain/data/document_starts.hpp"
#include "mpitrain/data/sample_stream.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/monitor/op_profile.hpp"
#include "mpitrain/monitor/tensorboard.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/optim/loss_scaler.hpp"
#include "mpitrain/optim/lr_schedule.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/parallel/context_chunks.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"
#include "mpitrain/runtime/dir_lock.hpp"
#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/signals.hpp"
#include "mpitrain/runtime/watchdog.hpp"
#include "mpitrain/train/batch_loader.hpp"
#include "mpitrain/train/batch_prefetch.hpp"
#include "mpitrain/train/checkpoint_mirror.hpp"
#include "mpitrain/train/checkpointer.hpp"
#include "mpitrain/train/comm_groups.hpp"
#include "mpitrain/train/device_setup.hpp"
#include "mpitrain/train/metrics.hpp"
#include "mpitrain/train/numeric_guard.hpp"
#include "mpitrain/train/pipeline_runner.hpp"
#include "mpitrain/train/bucket_sync.hpp"
#include "mpitrain/train/sharded_units.hpp"
#include "mpitrain/train/update_step.hpp"

namespace mpitrain {

class Trainer {
 public:
  // Set-up, collective over world. Throws UsageError (on every rank alike) for bad input, and
  // StopRequested (likewise) when a stop signal came during start-up.
  Trainer(const Options& options, const MpiComm& world, const StopSignals& signals);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Returns the exit code: kExitOk, kExitRequeue when a signal or the time limit stopped the run
  // after saving a checkpoint, kExitFailure when a numeric guard or the replica check stopped it.
  int run();

 private:
  // One step's outcome: go on, or leave with this exit code.
  struct StepEnd {
    bool stop = false;
    int exit_code = 0;
  };

  // ---- set-up (trainer_setup.cpp) ----
  void check_inputs();          // options, data, model shape, layout: UsageError before any work
  void lock_out_dir();          // rank 0 takes the out-dir's lock, then checks what it holds
  void build_model();           // grid, communicators, backend, model
  void build_step_parts();      // runner, buckets, optimizer, update, checkpoints, resume, then
                                // the out-dir written: run.ini, trace, tensorboard, metrics
  void print_banner() const;    // model, layout, batch, peak, memory per rank
  std::string run_ini() const;  // run.ini: the options with what the set-up resolved

  // ---- the run (trainer.cpp) ----
  void resume();                    // --resume: state, step, samples consumed; its seed checked
  std::optional<CheckpointManifest> load_newer_than_latest(const std::string& dir,
                                                          const CheckpointState& target);
  StepEnd step(int step);           // one optimizer step and its metrics record; step counts from 0
  double evaluate();                // mean validation loss per token
  void after_evaluation(int step);  // evaluate, log, --save-best
  StepEnd stop_or_save(int step);   // the stop requests agreed on, the checkpoint of this step
  int finish(int exit_code);  // the save in flight committed, report.json, the trace closed
  void write_op_profile() const;  // --profile-ops: rank 0's table, printed and in the out-dir
  int export_and_sample();    // the whole model on rank 0: --export-*, the text sample
  CheckpointManifest manifest(int step) const;
  const float* host_params();      // the parameters in host memory (for the replica check)
  std::string zero_text() const;   // ", ZeRO-3 hybrid: 2 x 2 replicas" for the start-up line
  double blocked_seconds() const;  // over every communicator, since the reset

  Options options_;  // a copy: an explicit --resume completes it from the checkpoint
  const TrainConfig& t_;
  const MpiComm& world_;
  const bool root_;
  const StopSignals& signals_;  // installed by main() before MPI_Init
  FaultPlan faults_;
  std::optional<DirLock> out_dir_lock_;  // rank 0's, held until everything else is gone

  // What the options and the data decide (check_inputs).
  GridShape shape_;
  std::optional<ContextChunks> chunks_;  // --cp > 1: this rank's two chunks of each sequence
  int local_seq_len() const { return chunks_ ? chunks_->local_len() : t_.seq_len; }
  std::string checkpoints_dir() const;  // <out-dir>/checkpoints: the store's, --resume auto's
  std::vector<int> stage_first_layer_;
  PipelineSchedule schedule_{};
  std::optional<Dataset> train_, val_;  // --train-data (none: --steps 0), --val-data
  const Corpus* val_windows_ = nullptr;  // val_'s files in order; null without --val-data
  std::unique_ptr<Tokenizer> tokenizer_;  // the sample's (train/sample_tokenizer.hpp); or null
  std::string tokenizer_descriptor_;      // its file, copied into <out-dir>/tokenizer/; or ""
  std::optional<DocumentBoundary> documents_;  // --document-mask: the tokenizer's boundary
  std::optional<int32_t> loss_boundary_;  // --mask-boundary-loss: its token (data/loss_mask.hpp)
  // A loss mask (the boundary's, or the training data's /loss_mask): the step's loss is the mean
  // over its scored targets, whose count is summed over the ranks.
  bool loss_masked_ = false;
  std::optional<ResumeSource> resume_source_;  // an explicit --resume PATH
  bool continues_run_ = false;                 // resuming the run in out-dir (auto, or its own)
  bool params_from_checkpoint_ = false;        // a resume that loads or stops: no initial values
  ModelConfig cfg_;

  // The machinery (build_model, build_step_parts), destroyed in the reverse order.
  std::optional<Grid> grid_;
  std::optional<ParamLayout> full_layout_;  // the whole model, as one rank would hold it
  std::unique_ptr<CommGroups> comms_;
  std::optional<MpiComm> node_;  // the ranks of this host (threads, the peak's cache)
  std::string allowed_cpus_;     // this rank's affinity, "0-3"
  DeviceSetup devices_;
  int threads_ = 1;
  double cpu_share_ = 0;  // this rank's share of its host's CPUs (runtime/affinity.hpp); above
                          // threads_, a background save's writer has a CPU to itself
  ModelOptions model_options_{};
  std::unique_ptr<OpProfile> op_profile_;  // --profile-ops: what backend_ records into
  std::unique_ptr<Backend<float>> backend_;
  std::unique_ptr<Model<float>> model_;
  double device_peak_ = 0.0;  // --device cuda: GFLOP/s of its GEMMs, measured unless given
  int micro_batch_ = 0, micro_batches_ = 0;
  std::unique_ptr<Watchdog> watchdog_;
  std::vector<Communicator*> blocking_;
  TraceRecorder trace_;
  OptimizerConfig optimizer_config_{};
  std::optional<LrSchedule> lr_schedule_;
  std::optional<SampleStream> stream_;
  std::optional<BatchLoader> loader_;
  std::unique_ptr<BatchPrefetcher> prefetch_;  // --prefetch on mapped files: reads loader_ ahead
  std::unique_ptr<PipelineRunner> runner_;
  std::unique_ptr<GradBuckets> buckets_;      // ZeRO 0/1
  std::unique_ptr<BucketSync> bucket_sync_;  // over buckets_
  std::unique_ptr<ShardedUnits> sharded_;    // ZeRO 2/3 (built with the model it lends to)
  DpSync* sync_ = nullptr;                   // one of the two
  bool tied_copies_ = false;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LossScaler> scaler_;
  std::unique_ptr<NumericGuard> guard_;
  std::unique_ptr<UpdateStep> update_;
  PipelineRunner::Loader load_;              // the step's micro-batches from the global order
  std::function<void(size_t)> grads_ready_;  // starts the buckets' sync during backward
  std::unique_ptr<CheckpointStore> store_;
  std::optional<CheckpointState> state_;
  Buf<float> held_params_;  // the parameters a checkpoint loads: the stage's, or ZeRO-3's pieces
  bool mirrored_ = false;  // on a device: checkpoints go through host copies (CheckpointMirror)
  std::vector<float> params_copy_;          // on a device: the parameters for the replica check
  std::unique_ptr<MetricsLog> log_;
  std::string report_path_;
  std::unique_ptr<Checkpointer> checkpointer_;  // after what it uses: its writer joined first

  // The run's progress and figures.
  int start_step_ = 0;
  uint64_t consumed_ = 0;         // samples of the global order
  double best_val_ = 0.0;         // for --save-best (NaN: none)
  double peak_ = 0.0;             // GFLOP/s of all ranks together, for MFU
  double peak_cpus_ = 0.0;        // CPU: the CPUs it counts, each host's counted once
  double peak_rate_ = 0.0;        // CPU: rank 0's sgemm rate under its threads and CPUs
  int peak_suspect_ranks_ = 0;    // ranks whose peak may be too low (contended, unchecked)
  std::string peak_source_;       // rank 0's: given, cached (when, where) or measured now
  std::string peak_of_;           // CPU: what the peak measures ("the best bf16 gemm", ...)
  double flops_per_token_ = 0.0;  // PaLM's 6N + 12 L d T (model_flops_per_token)
  double tokens_per_step_ = 0.0;
  double held_bytes_[3] = {0, 0, 0};  // per rank at most: params + grads, optimizer, activations
  std::vector<int32_t> tokens_, targets_;  // one micro-batch, for evaluation
  std::vector<int32_t> doc_starts_;        // and its document starts (--document-mask)
  std::vector<int32_t> local_tokens_, local_targets_, local_doc_starts_;  // --cp > 1: its chunks
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();  // set-up
  std::chrono::steady_clock::time_point run_start_;                                 // the step loop
  double slowest_step_ = 0.0;  // seconds, for --exit-after-minutes
  double op_gemm_gflops_ = 0.0, op_bandwidth_gbs_ = 0.0;  // --profile-ops: this rank's floors
};

// Trainer(options, world, signals).run(); a stop during start-up: its message, kExitRequeue.
int train(const Options& options, const MpiComm& world, const StopSignals& signals);

}  // namespace mpitrain
