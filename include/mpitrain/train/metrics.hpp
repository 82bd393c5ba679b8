// What a run reports, on rank 0: one console line and one JSON line (<out_dir>/metrics.jsonl) per
// step and per evaluation. Losses are written with %.9g so runs can be compared exactly.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace mpitrain {

struct StepRecord {
  int step;             // 1-based: the number of optimizer steps done
  int steps;            // of the run
  double loss;          // mean over the step's global batch
  double lr;
  double grad_norm;     // global, before clipping
  double tokens_per_s;  // all ranks together
  double step_ms;
  double comm_ms;       // time blocked on communication that was not hidden
  double mfu;           // fraction of the summed peak of all ranks
};

class MetricsLog {
 public:
  // Only the active rank (rank 0) writes. A fresh run (resumed_step < 0) starts the file anew; a
  // resumed run keeps the records of steps <= resumed_step and appends after them, so the file
  // reads as one run even when steps after the checkpoint had been logged before a crash.
  MetricsLog(const std::string& path, bool active, int64_t resumed_step = -1);
  void step(const StepRecord& r);
  void eval(int step, double val_loss);

 private:
  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
  bool active_;
};

}  // namespace mpitrain
