#include "mpitrain/train/metrics.hpp"

#include <cerrno>
#include <cstring>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

MetricsLog::MetricsLog(const std::string& path, bool active) : active_(active) {
  if (!active_) return;
  file_.reset(std::fopen(path.c_str(), "w"));
  if (!file_) MPITRAIN_THROW("cannot write " + path + ": " + std::strerror(errno));
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
