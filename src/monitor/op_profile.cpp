#include "mpitrain/monitor/op_profile.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace mpitrain {

namespace {

const char* phase_name(OpPhase p) {
  switch (p) {
    case OpPhase::Forward:
      return "forward";
    case OpPhase::Loss:
      return "loss";
    case OpPhase::Backward:
      return "backward";
    case OpPhase::Optimizer:
      return "optimizer";
    case OpPhase::Memory:
      return "memory";
  }
  return "?";
}

}  // namespace

void OpProfile::begin_step(bool counted) { counting_ = counted; }

void OpProfile::end_step(double seconds) {
  if (counting_) {
    ++steps_;
    step_seconds_ += seconds;
  }
  counting_ = false;
}

void OpProfile::record(OpPhase phase, const char* op, double seconds, double flops, double bytes) {
  if (!counting_) return;
  auto it = std::find_if(rows_.begin(), rows_.end(), [&](const Row& x) {
    return x.phase == phase && std::strcmp(x.op, op) == 0;
  });
  if (it == rows_.end()) it = rows_.insert(rows_.end(), {phase, op});
  it->calls += 1;
  it->seconds += seconds;
  it->flops += flops;
  it->bytes += bytes;
}

std::string OpProfile::table(const std::string& header, double gemm_gflops,
                             double bandwidth_gbs) const {
  std::string out = header + "\n";
  if (steps_ == 0) return out + "no step was profiled (the first step is the warm-up)\n";
  std::vector<Row> rows = rows_;
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) {
    return a.phase != b.phase ? a.phase < b.phase : a.seconds > b.seconds;
  });
  char line[256];
  std::snprintf(line, sizeof line, "%-9s %-20s %6s %9s %6s %8s %7s %9s %7s\n", "phase", "op",
                "calls", "ms/step", "share", "GFLOP/s", "GB/s", "floor ms", "x floor");
  out += line;
  const double n = steps_;
  const double step_ms = 1e3 * step_seconds_ / n;
  double ops_ms = 0, floor_ms_sum = 0;
  for (const Row& r : rows) {
    const double ms = 1e3 * r.seconds / n;
    const double floor_ms =
        1e3 * std::max(r.flops / (gemm_gflops * 1e9), r.bytes / (bandwidth_gbs * 1e9)) / n;
    ops_ms += ms;
    floor_ms_sum += floor_ms;
    std::snprintf(line, sizeof line, "%-9s %-20s %6.0f %9.3f %5.1f%% %8.1f %7.1f %9.3f %7.2f\n",
                  phase_name(r.phase), r.op, r.calls / n, ms, 100 * ms / step_ms,
                  r.seconds > 0 ? r.flops / r.seconds / 1e9 : 0.0,
                  r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0.0, floor_ms,
                  floor_ms > 0 ? ms / floor_ms : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof line, "%-30s %16.3f %5.1f%% %27.3f %7.2f\n", "all ops", ops_ms,
                100 * ops_ms / step_ms, floor_ms_sum, ops_ms / floor_ms_sum);
  out += line;
  std::snprintf(line, sizeof line, "%-30s %16.3f %5.1f%%\n", "outside the ops (comm, data, loop)",
                step_ms - ops_ms, 100 * (step_ms - ops_ms) / step_ms);
  out += line;
  std::snprintf(line, sizeof line, "%-30s %16.3f %5.1f%% %27.3f %7.2f\n", "step", step_ms, 100.0,
                floor_ms_sum, step_ms / floor_ms_sum);
  return out + line;
}

}  // namespace mpitrain
