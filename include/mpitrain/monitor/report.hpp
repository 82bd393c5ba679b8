// The end-of-run summary: <out-dir>/report.json and a few console lines, written at the end of a
// run and on an early stop. Step statistics leave out the run's first step (warm-up: first-touch
// page faults, MPI connection set-up) when there is more than one; the file says which steps.
// A run stopped and resumed is made of segments (one launch each: from its start or resume to
// its stop); the statistics are this segment's, and the tokens and wall time are given for both
// this segment ("segment") and the whole run ("run": every segment's steps that metrics.jsonl
// keeps, the earlier ones' time carried in it), each with its own tokens / wall time.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace mpitrain {

// One step record's figures.
struct StepFigures {
  int step;
  double step_ms, tokens_per_s, mfu;
  double forward_ms, backward_ms, optimizer_ms, exposed_comm_ms, data_ms;
  double checkpoint_ms;  // the stall: what saves cost the step loop before this step
  double peak_rss_mib;
  double host_scratch_mib;  // the backend's (Backend::host_scratch_bytes), the largest rank's
  double loss = std::numeric_limits<double>::quiet_NaN();  // the step's train loss
  uint64_t tokens_seen = 0;  // of the whole run by the end of this step (all ranks, resumes too)
  bool scored = true;        // false: no target scored, no loss (left out of the final loss)
};

// What the run's record (metrics.jsonl) holds from the segments before this one; all 0 for a
// fresh run. Their wall time runs from each segment's start to the step the next one resumed
// from: time in a queue and the steps redone after a stop are not in it.
struct EarlierSegments {
  int count = 0;               // segments before this one
  int first_step = 0;          // the record's first step
  uint64_t tokens_before = 0;  // tokens seen before it (a run begun from another's checkpoint)
  int resumed_step = 0;        // the step this segment resumed from
  uint64_t tokens_seen = 0;    // by then
  double seconds = 0.0;        // wall time of the earlier segments
};

// Above this share of the step time, exposed communication gets a WARNING line.
inline constexpr double kExposedCommWarnShare = 0.30;

// A step's tokens from its record: tokens_per_s is the step's tokens over its time.
uint64_t step_tokens(double tokens_per_s, double step_ms);

// Texts for the console: 3723 s -> "1:02:03"; 1234567 -> "1.23M" (K, M, B).
std::string clock_text(double seconds);
std::string count_text(double n);

// p-th percentile (0..100) of ascending `sorted` (non-empty), interpolating linearly between the
// closest ranks (numpy's default): p50 of {1, 2, 3, 4} = 2.5.
double percentile(const std::vector<double>& sorted, double p);

class RunReport {
 public:
  // loss_window: the final train loss is the mean over the last loss_window steps (the console's
  // log interval); start: when the run began, for the wall time.
  explicit RunReport(int loss_window = 1, std::chrono::steady_clock::time_point start =
                                              std::chrono::steady_clock::now());
  // This segment continues a run with earlier segments (MetricsLog reads them from its record).
  void continues(const EarlierSegments& earlier) { earlier_ = earlier; }
  // What MFU counts against, for the summary: "the best sgemm", "the best bf16 gemm", ...
  void mfu_of(const std::string& peak) { mfu_of_ = peak; }
  void add_step(const StepFigures& f);
  void add_eval(int step, double val_loss);
  // A save's stall of the step loop; a checkpoint committed (any kind): the writer's time and
  // the bytes (a synchronous save: both, the write being its stall).
  void add_checkpoint_stall(double seconds);
  void add_checkpoint_written(double seconds, uint64_t bytes);
  // The set-up ends now, the steps begin: the seconds since start (MPI's and the data's checks,
  // the model built, its parameters drawn or loaded, the tensors allocated, the peak found) are
  // the report's setup_s and the summary's "set-up".
  void set_up_done();
  // Writes the JSON report to path and prints the summary to out. skipped_steps: steps the
  // trainer discarded; exit_code: the run's, 0 when it is done (anything else: stopped early, e.g.
  // 85 to be requeued). Throws Error on I/O failure.
  void finish(const std::string& path, int skipped_steps, int exit_code, std::FILE* out) const;

 private:
  struct Sums {
    int steps = 0;
    double step_ms = 0, tokens_per_s = 0, mfu = 0, forward_ms = 0, backward_ms = 0,
           optimizer_ms = 0, exposed_comm_ms = 0, data_ms = 0, checkpoint_ms = 0;
    void add(const StepFigures& f);
  };
  Sums first_, rest_;  // the run's first step; every later one
  // Steps first_step..last_step, their tokens and the wall time (set-up, evaluations, saves in
  // it): as JSON members and as console text, each with tokens / wall time.
  struct Span {
    int first_step, last_step;
    uint64_t tokens;
    double seconds;
    std::string json() const;
    std::string text() const;
  };
  int first_step_ = 0, last_step_ = 0;
  std::vector<double> step_ms_, tokens_per_s_;  // of every step, for the percentiles
  double peak_rss_mib_ = 0.0, host_scratch_mib_ = 0.0;
  int checkpoints_ = 0;
  double checkpoint_stall_seconds_ = 0.0, checkpoint_write_seconds_ = 0.0;
  uint64_t checkpoint_bytes_ = 0;
  // The outcome: the last loss_window_ train losses, validation, tokens, the clock.
  size_t loss_window_;
  std::deque<std::pair<int, double>> last_losses_;  // (step, loss) of steps that scored
  int last_eval_step_ = -1, best_eval_step_ = -1;
  double last_val_ = 0.0, best_val_ = 0.0;
  uint64_t tokens_seen_ = 0, segment_tokens_before_ = 0;  // after the last step; before the first
  std::chrono::steady_clock::time_point start_;
  double set_up_seconds_ = -1.0;  // -1: the steps never began
  EarlierSegments earlier_;
  std::string mfu_of_;  // "" where not said
};

}  // namespace mpitrain
