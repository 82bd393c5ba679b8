#include "mpitrain/parallel/pipeline_schedule.hpp"

#include <algorithm>
#include <sstream>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::GPipe;
  if (name == "1f1b") return PipelineSchedule::OneFOneB;
  throw UsageError("pp-schedule must be 'gpipe' or '1f1b', not '" + name + "'");
}

std::string to_string(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::GPipe ? "gpipe" : "1f1b";
}

std::vector<PipeOp> pipeline_ops(PipelineSchedule schedule, int m, int stages, int stage) {
  std::vector<PipeOp> ops;
  if (schedule == PipelineSchedule::GPipe) {
    for (int i = 0; i < m; ++i) ops.push_back({true, i});
    for (int i = 0; i < m; ++i) ops.push_back({false, i});
    return ops;
  }
  const int warmup = std::min(stages - stage - 1, m);
  int next_f = 0, next_b = 0;
  for (; next_f < warmup; ++next_f) ops.push_back({true, next_f});
  while (next_f < m) {  // steady state: 1F1B
    ops.push_back({true, next_f++});
    ops.push_back({false, next_b++});
  }
  while (next_b < m) ops.push_back({false, next_b++});  // cool-down
  return ops;
}

int pipeline_slots(PipelineSchedule schedule, int m, int stages, int stage) {
  return schedule == PipelineSchedule::GPipe ? m : std::min(m, stages - stage);
}

double pipeline_bubble(int m, int stages) {
  return static_cast<double>(stages - 1) / (m + stages - 1);
}

std::vector<int> pipeline_layer_split(int n_layer, int stages, const std::string& counts) {
  require(n_layer >= stages, "n-layer " + std::to_string(n_layer) + " is fewer than the " +
                                 std::to_string(stages) + " pipeline stages (pp)");
  std::vector<int> sizes;
  if (counts.empty()) {
    for (int s = 0; s < stages; ++s) sizes.push_back(n_layer / stages + (s < n_layer % stages));
  } else {
    std::stringstream in(counts);
    std::string item;
    while (std::getline(in, item, ',')) {
      int v = 0;
      try {
        v = std::stoi(item);
      } catch (const std::exception&) {
        throw UsageError("pp-layers must be a comma-separated list of layer counts, not '" +
                         counts + "'");
      }
      require(v >= 1, "pp-layers: every stage needs at least one layer ('" + counts + "')");
      sizes.push_back(v);
    }
    int sum = 0;
    for (int v : sizes) sum += v;
    require(static_cast<int>(sizes.size()) == stages && sum == n_layer,
            "pp-layers '" + counts + "' must list " + std::to_string(stages) +
                " stage sizes adding up to n-layer " + std::to_string(n_layer));
  }
  std::vector<int> first = {0};
  for (int v : sizes) first.push_back(first.back() + v);
  return first;
}

}  // namespace mpitrain
