// --profile-ops: where a step's time goes, op by op, against each op's floor.
//
// ProfilingBackend (backend/profiling_backend.hpp) times every backend op it forwards and gives
// this the time with the op's FLOPs and bytes. The trainer brackets each step (begin_step /
// end_step); ops outside a step (evaluation, set-up) are dropped, and so is the first step of
// the run (the warm-up: first touches, oneDNN's and OpenBLAS's thread start).
//
// Floor of an op = max(FLOPs / the sgemm rate, bytes / the memory bandwidth): what it would take
// at the machine's matrix-multiply rate (for the GEMM ops; the pointwise ops' few FLOPs are
// not counted) or its bytes moved once at the copy bandwidth, whichever is longer. Bytes are
// each operand read once and each result written once, at its storage size.
#pragma once

#include <string>
#include <vector>

namespace mpitrain {

enum class OpPhase { Forward, Loss, Backward, Optimizer, Memory };

class OpProfile {
 public:
  // Ops recorded from here belong to the step; the warm-up's (counted false) are dropped.
  void begin_step(bool counted);
  void end_step(double seconds);  // the step's wall time
  void record(OpPhase phase, const char* op, double seconds, double flops, double bytes);

  // The table: ms per step of each op, its rates and its floor, the ops' sum, what the step
  // spent outside the ops, the step. `header`: the first line (who, which steps, the rates'
  // sources). Empty steps: says that no step was profiled.
  std::string table(const std::string& header, double gemm_gflops, double bandwidth_gbs) const;
  int steps() const { return steps_; }

 private:
  struct Row {
    OpPhase phase;
    const char* op;  // a string literal of ProfilingBackend
    double calls = 0, seconds = 0, flops = 0, bytes = 0;
  };
  std::vector<Row> rows_;  // the profiled steps' sums, in the order first recorded
  bool counting_ = false;  // inside a counted step
  int steps_ = 0;
  double step_seconds_ = 0;  // the profiled steps' wall time
};

}  // namespace mpitrain
