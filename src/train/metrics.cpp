#include "mpitrain/train/metrics.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <vector>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

MetricsLog::MetricsLog(const std::string& path, bool active, int64_t resumed_step)
    : active_(active) {
  if (!active_) return;
  std::vector<std::string> kept;
  if (resumed_step >= 0) {
    std::ifstream old(path);
    for (std::string line; std::getline(old, line);) {
      const size_t at = line.find("\"step\": ");
      if (at != std::string::npos && std::stoll(line.substr(at + 8)) <= resumed_step)
        kept.push_back(line);
    }
  }
  file_.reset(std::fopen(path.c_str(), "w"));
  if (!file_) MPITRAIN_THROW("cannot write " + path + ": " + std::strerror(errno));
  for (const std::string& line : kept) std::fprintf(file_.get(), "%s\n", line.c_str());
  std::fflush(file_.get());
}

void MetricsLog::step(const StepRecord& r) {
  if (!active_) return;
  std::printf("step %*d/%d | loss %.6f | lr %.3e | norm %.4f | %8.0f tok/s | %8.1f ms "
              "(comm %.1f) | MFU %5.1f%%\n",
              static_cast<int>(std::to_string(r.steps).size()), r.step, r.steps, r.loss, r.lr,
              r.grad_norm, r.tokens_per_s, r.step_ms, r.comm_ms, 100.0 * r.mfu);
  std::fflush(stdout);
  std::fprintf(file_.get(),
               "{\"step\": %d, \"loss\": %.9g, \"lr\": %.9g, \"grad_norm\": %.9g, "
               "\"tokens_per_s\": %.6g, \"step_ms\": %.6g, \"comm_ms\": %.6g, \"mfu\": %.6g}\n",
               r.step, r.loss, r.lr, r.grad_norm, r.tokens_per_s, r.step_ms, r.comm_ms, r.mfu);
  std::fflush(file_.get());
}

void MetricsLog::eval(int step, double val_loss) {
  if (!active_) return;
  std::printf("eval at step %d | val loss %.6f\n", step, val_loss);
  std::fflush(stdout);
  std::fprintf(file_.get(), "{\"step\": %d, \"val_loss\": %.9g}\n", step, val_loss);
  std::fflush(file_.get());
}

}  // namespace mpitrain
