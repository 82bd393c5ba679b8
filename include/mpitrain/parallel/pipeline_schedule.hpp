// The order in which a pipeline stage runs the forward (F) and backward (B) passes of the m
// micro-batches of a step.
//
//   GPipe: all forwards, then all backwards:            F0 F1 .. Fm-1  B0 B1 .. Bm-1
//   1F1B:  pp - s - 1 warm-up forwards on stage s, then one forward / one backward alternately,
//          then the remaining backwards (PipeDream-flush, Megatron's default). Same bubble as
//          GPipe, but at most pp - s micro-batches in flight instead of m.
// Bubble fraction of both: (pp - 1) / (m + pp - 1).
#pragma once

#include <string>
#include <vector>

namespace mpitrain {

enum class PipelineSchedule { GPipe, OneFOneB };

PipelineSchedule parse_pipeline_schedule(const std::string& name);  // "gpipe" | "1f1b"
std::string to_string(PipelineSchedule schedule);

struct PipeOp {
  bool forward;
  int micro;
};

std::vector<PipeOp> pipeline_ops(PipelineSchedule schedule, int micro_batches, int stages, int stage);
// Activation slots stage `stage` needs: micro-batches it holds between their F and B at once.
int pipeline_slots(PipelineSchedule schedule, int micro_batches, int stages, int stage);
double pipeline_bubble(int micro_batches, int stages);

// Splits n_layer blocks over `stages` contiguous stages: the first (n_layer % stages) stages get
// one more. `counts` ("3,1,...") overrides; UsageError if it does not add up or leaves a stage
// empty. Returns the first layer of each stage, plus n_layer at the end.
std::vector<int> pipeline_layer_split(int n_layer, int stages, const std::string& counts);

}  // namespace mpitrain
