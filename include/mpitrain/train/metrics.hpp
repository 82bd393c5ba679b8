// What a run reports, on rank 0: one JSON line (<out_dir>/metrics.jsonl) per step and per
// evaluation, one console line per --log-interval steps (and for the run's first and last step:
// the loss averaged over the steps since the previous line, tokens seen, elapsed time, ETA), the
// same scalars as TensorBoard events (--tensorboard), and at the end report.json with a console
// summary (monitor/report.hpp). Losses are written with %.9g so runs can be compared exactly.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/monitor/report.hpp"
#include "mpitrain/monitor/tensorboard.hpp"

namespace mpitrain {

// One mixture-of-experts layer over a step's global batch (train/moe_metrics.hpp reduces it).
struct MoeLayerRecord {
  int layer = 0;                // global layer index
  double aux_loss = 0;          // load-balancing loss E sum_e f_e P_e, mean over the micro-batches
  double z_loss = 0;            // router z-loss mean(lse^2), mean over the micro-batches
  std::vector<int64_t> tokens;  // (E) rows routed to each expert (sum: rows x top-k)
  double tokens_max() const;
  double tokens_mean() const;
  double imbalance() const { return tokens_mean() > 0 ? tokens_max() / tokens_mean() : 0.0; }
};

struct StepRecord {
  int step;     // 1-based: the number of optimizer steps done
  int steps;    // of the run
  double loss;  // mean over the step's global batch
  double lr;
  double grad_norm;     // global, before clipping
  double tokens_per_s;  // all ranks together
  double step_ms;
  double exposed_comm_ms;  // time blocked waiting for communication that compute did not hide
  double mfu;              // fraction of the summed peak of all ranks
  // Where rank 0's step time went (ms): compute of the forward and backward passes (without the
  // communication they waited for), the optimizer, waiting for the batch.
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0, data_ms = 0;
  double peak_rss_mib = 0;    // host peak RSS, the largest of all ranks
  // The backend's host scratch by now (Backend::host_scratch_bytes), the largest of all ranks:
  // part of the peak RSS that the start-up line's parameters, optimizer state and activations
  // leave out (the CPU's fp32 staging of bf16 / fp16 tensors)
  double host_scratch_mib = 0;
  uint64_t dp_bytes = 0;      // rank 0's bytes_sent in its data-parallel group (comm/)
  double loss_scale = 1;      // after this step's update (fp16: optim/loss_scaler.hpp)
  int64_t skipped_steps = 0;  // updates skipped so far (overflow, --on-nan skip)
  // Energy all GPUs of the job used during the step (NVML, monitor/nvml_power.hpp); < 0 where
  // some rank cannot read it: then gpu_power_w (joules / step time) and joules_per_token are
  // left out of the record.
  double gpu_joules = -1;
  uint64_t tokens_seen = 0;  // of the whole run by the end of this step, resumes included
  // Mixture of experts: each MoE layer's routing and losses (empty for a dense model). The
  // objective adds moe-aux-loss-coef x their aux_loss and moe-z-loss-coef x their z_loss; loss
  // above is the cross-entropy alone, comparable with a dense run's.
  std::vector<MoeLayerRecord> moe = {};
  // false: under a loss mask the step scored no target, so it has no loss (nan; null in the
  // file), and the console's and report's means leave it out.
  bool scored = true;
};

class MetricsLog {
 public:
  // Only the active rank (rank 0) writes. A fresh run (resumed_step < 0) starts the file anew; a
  // resumed run keeps the records of steps <= resumed_step and appends after them, so the file
  // reads as one run even when steps after the checkpoint had been logged before a crash. Each
  // step record says its segment (1 for the first launch, + 1 at each resume of the run) and
  // run_time_s, the wall time of the run's segments up to it (report.hpp's EarlierSegments).
  // tensorboard: where the scalars go too (null = nowhere). log_interval: steps per console line
  // (>= 1). start: when the run began, for the elapsed time, the ETA and the report's wall time.
  MetricsLog(const std::string& path, bool active, int64_t resumed_step = -1,
             std::unique_ptr<TensorBoardWriter> tensorboard = nullptr, int log_interval = 1,
             std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now());
  void step(const StepRecord& r);
  void mfu_of(const std::string& peak) { report_.mfu_of(peak); }  // RunReport::mfu_of
  void eval(int step, double val_loss);
  // A save's cost to the step loop (the wait for the save before, the staging copy, and for a
  // synchronous save the write): into the next step record's checkpoint_stall_ms (it is taken
  // after a step's record is written, outside step_ms) and the report.
  void checkpoint_stall(double seconds);
  // A checkpoint committed: the writer's time and the bytes, into the next step record's
  // checkpoint_write_ms and checkpoint_bytes, and the report.
  void checkpoint_written(double seconds, uint64_t bytes);
  void set_up_done() { report_.set_up_done(); }  // RunReport::set_up_done
  // <report_path> (JSON) and the console summary; exit_code: the run's (0 done, else stopped).
  void finish(const std::string& report_path, int skipped_steps, int exit_code);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
  bool active_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  void console_line(const StepRecord& r);

  RunReport report_;
  EarlierSegments earlier_;  // of the run's record, before this segment (none for a fresh run)
  // Since the last step record: the stalls, the commits' write time and bytes.
  double checkpoint_stall_seconds_ = 0.0, checkpoint_write_seconds_ = 0.0;
  uint64_t checkpoint_bytes_ = 0;
  int log_interval_;
  std::chrono::steady_clock::time_point start_;
  int first_step_ = -1;         // of this run (after a resume: the first after the checkpoint)
  double interval_loss_ = 0.0;  // the sum over the steps since the last console line
  double interval_aux_ = 0.0, interval_z_ = 0.0;  // MoE: the layers' summed losses, likewise
  int interval_steps_ = 0;
  int interval_scored_ = 0;  // of those, the steps with a loss (StepRecord::scored)
};

}  // namespace mpitrain
