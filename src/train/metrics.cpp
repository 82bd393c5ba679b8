#include "mpitrain/train/metrics.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "mpitrain/monitor/json_number.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// The earlier segments as the kept step records tell them: none where they do not say (records
// written before segments were recorded).
EarlierSegments earlier_segments(const std::vector<std::string>& kept) {
  std::optional<nlohmann::json> first, last;
  for (const std::string& line : kept) {
    nlohmann::json r = nlohmann::json::parse(line, nullptr, false);
    if (r.is_discarded() || !r.contains("loss")) continue;  // an evaluation's record
    if (!first) first = r;
    last = std::move(r);
  }
  const auto has = [](const std::optional<nlohmann::json>& r, const char* key) {
    return r && r->contains(key) && (*r)[key].is_number();
  };
  if (!has(first, "tokens_seen") || !has(first, "tokens_per_s") || !has(first, "step_ms") ||
      !has(last, "segment") || !has(last, "tokens_seen") || !has(last, "run_time_s"))
    return {};
  const uint64_t first_seen = (*first)["tokens_seen"].get<uint64_t>();
  EarlierSegments e;
  e.count = (*last)["segment"].get<int>();
  e.first_step = (*first)["step"].get<int>();
  e.tokens_before =
      first_seen - std::min(first_seen, step_tokens((*first)["tokens_per_s"].get<double>(),
                                                    (*first)["step_ms"].get<double>()));
  e.resumed_step = (*last)["step"].get<int>();
  e.tokens_seen = (*last)["tokens_seen"].get<uint64_t>();
  e.seconds = (*last)["run_time_s"].get<double>();
  return e;
}

// The MoE layers' losses summed over the layers: {aux, z}.
std::pair<double, double> moe_losses(const std::vector<MoeLayerRecord>& layers) {
  double aux = 0, z = 0;
  for (const MoeLayerRecord& l : layers) aux += l.aux_loss, z += l.z_loss;
  return {aux, z};
}

// The largest imbalance (max / mean tokens per expert) of the MoE layers.
double moe_imbalance(const std::vector<MoeLayerRecord>& layers) {
  double worst = 0;
  for (const MoeLayerRecord& l : layers) worst = std::max(worst, l.imbalance());
  return worst;
}

// metrics.jsonl's MoE fields: the summed losses, the worst imbalance, and per layer its losses,
// tokens per expert and their max and mean.
std::string moe_fields(const std::vector<MoeLayerRecord>& layers) {
  const auto n9 = [](double v) { return json_number(v, 9); };
  const auto [aux, z] = moe_losses(layers);
  std::string text = ", \"moe_aux_loss\": " + n9(aux) + ", \"moe_z_loss\": " + n9(z) +
                     ", \"moe_imbalance\": " + json_number(moe_imbalance(layers), 6) +
                     ", \"moe_layers\": [";
  for (size_t i = 0; i < layers.size(); ++i) {
    const MoeLayerRecord& l = layers[i];
    text += (i ? ", " : "") + std::string("{\"layer\": ") + std::to_string(l.layer) +
            ", \"aux_loss\": " + n9(l.aux_loss) + ", \"z_loss\": " + n9(l.z_loss) +
            ", \"tokens_max\": " + json_number(l.tokens_max(), 9) +
            ", \"tokens_mean\": " + json_number(l.tokens_mean(), 9) + ", \"tokens\": [";
    for (size_t e = 0; e < l.tokens.size(); ++e)
      text += (e ? ", " : "") + std::to_string(l.tokens[e]);
    text += "]}";
  }
  return text + "]";
}

}  // namespace

double MoeLayerRecord::tokens_max() const {
  int64_t most = 0;
  for (int64_t n : tokens) most = std::max(most, n);
  return static_cast<double>(most);
}

double MoeLayerRecord::tokens_mean() const {
  double sum = 0;
  for (int64_t n : tokens) sum += static_cast<double>(n);
  return tokens.empty() ? 0.0 : sum / static_cast<double>(tokens.size());
}

MetricsLog::MetricsLog(const std::string& path, bool active, int64_t resumed_step,
                       std::unique_ptr<TensorBoardWriter> tensorboard, int log_interval,
                       std::chrono::steady_clock::time_point start)
    : active_(active),
      tensorboard_(std::move(tensorboard)),
      report_(log_interval, start),
      log_interval_(std::max(1, log_interval)),
      start_(start) {
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
  earlier_ = earlier_segments(kept);
  report_.continues(earlier_);
  file_.reset(std::fopen(path.c_str(), "w"));
  if (!file_) MPITRAIN_THROW("cannot write " + path + ": " + std::strerror(errno));
  for (const std::string& line : kept) std::fprintf(file_.get(), "%s\n", line.c_str());
  std::fflush(file_.get());
}

void MetricsLog::step(const StepRecord& r) {
  if (!active_) return;
  const double stall_ms = 1e3 * checkpoint_stall_seconds_;
  const double write_ms = 1e3 * checkpoint_write_seconds_;
  const uint64_t checkpoint_bytes = checkpoint_bytes_;
  checkpoint_stall_seconds_ = checkpoint_write_seconds_ = 0.0;
  checkpoint_bytes_ = 0;
  console_line(r);
  const double step_s = 1e-3 * r.step_ms, tokens = r.tokens_per_s * step_s;
  const bool energy = r.gpu_joules >= 0 && step_s > 0 && tokens > 0;
  // Non-finite values (a NaN loss or norm) as null: every line stays JSON.
  const auto n9 = [](double v) { return json_number(v, 9); };
  const auto n6 = [](double v) { return json_number(v, 6); };
  std::string line = "{\"step\": " + std::to_string(r.step);
  line += ", \"loss\": " + n9(r.loss) + ", \"lr\": " + n9(r.lr);
  line += ", \"grad_norm\": " + n9(r.grad_norm) + ", \"tokens_per_s\": " + n6(r.tokens_per_s);
  line += ", \"step_ms\": " + n6(r.step_ms) + ", \"mfu\": " + n6(r.mfu);
  line += ", \"forward_ms\": " + n6(r.forward_ms) + ", \"backward_ms\": " + n6(r.backward_ms);
  line += ", \"optimizer_ms\": " + n6(r.optimizer_ms);
  line += ", \"exposed_comm_ms\": " + n6(r.exposed_comm_ms) + ", \"data_ms\": " + n6(r.data_ms);
  line += ", \"checkpoint_stall_ms\": " + n6(stall_ms);
  line += ", \"checkpoint_write_ms\": " + n6(write_ms);
  line += ", \"checkpoint_bytes\": " + std::to_string(checkpoint_bytes);
  line += ", \"peak_rss_mib\": " + n6(r.peak_rss_mib);
  line += ", \"host_scratch_mib\": " + n6(r.host_scratch_mib);
  line += ", \"dp_bytes\": " + std::to_string(r.dp_bytes);
  line += ", \"loss_scale\": " + n9(r.loss_scale);
  line += ", \"skipped_steps\": " + std::to_string(r.skipped_steps);
  line += ", \"tokens_seen\": " + std::to_string(r.tokens_seen);
  line += ", \"segment\": " + std::to_string(earlier_.count + 1);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  line += ", \"run_time_s\": " + n9(earlier_.seconds + elapsed);
  if (energy) {
    line += ", \"gpu_power_w\": " + n6(r.gpu_joules / step_s);
    line += ", \"joules_per_token\": " + n6(r.gpu_joules / tokens);
  }
  if (!r.moe.empty()) line += moe_fields(r.moe);
  std::fprintf(file_.get(), "%s}\n", line.c_str());
  std::fflush(file_.get());
  if (tensorboard_) {
    const Scalar scalars[] = {{"train/loss", r.loss},
                              {"train/lr", r.lr},
                              {"train/grad_norm", r.grad_norm},
                              {"perf/tokens_per_s", r.tokens_per_s},
                              {"perf/mfu", r.mfu},
                              {"perf/step_ms", r.step_ms},
                              {"time/forward_ms", r.forward_ms},
                              {"time/backward_ms", r.backward_ms},
                              {"time/optimizer_ms", r.optimizer_ms},
                              {"time/exposed_comm_ms", r.exposed_comm_ms},
                              {"time/data_ms", r.data_ms},
                              {"time/checkpoint_stall_ms", stall_ms},
                              {"time/checkpoint_write_ms", write_ms},
                              {"memory/peak_rss_mib", r.peak_rss_mib},
                              {"memory/host_scratch_mib", r.host_scratch_mib},
                              {"train/loss_scale", r.loss_scale}};
    tensorboard_->write(r.step, scalars);
    if (energy) {
      const Scalar power[] = {{"energy/gpu_power_w", r.gpu_joules / step_s},
                              {"energy/joules_per_token", r.gpu_joules / tokens}};
      tensorboard_->write(r.step, power);
    }
    if (!r.moe.empty()) {
      const auto [aux, z] = moe_losses(r.moe);
      const Scalar moe[] = {{"moe/aux_loss", aux},
                            {"moe/z_loss", z},
                            {"moe/imbalance", moe_imbalance(r.moe)}};
      tensorboard_->write(r.step, moe);
    }
  }
  report_.add_step({r.step, r.step_ms, r.tokens_per_s, r.mfu, r.forward_ms, r.backward_ms,
                    r.optimizer_ms, r.exposed_comm_ms, r.data_ms, stall_ms, r.peak_rss_mib,
                    r.host_scratch_mib, r.loss, r.tokens_seen, r.scored});
}

// The first step of the run, every log_interval-th and the last: the loss averaged over the
// steps since the previous line, the step's own figures, tokens seen, elapsed time and the ETA
// (the run's mean time per step so far, evaluations and checkpoints included).
void MetricsLog::console_line(const StepRecord& r) {
  if (first_step_ < 0) first_step_ = r.step;
  if (r.scored) {
    interval_loss_ += r.loss;
    ++interval_scored_;
  }
  const auto [aux, z] = moe_losses(r.moe);
  interval_aux_ += aux;
  interval_z_ += z;
  ++interval_steps_;
  if (r.step != first_step_ && r.step % log_interval_ != 0 && r.step != r.steps) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double eta = elapsed / (r.step - first_step_ + 1) * (r.steps - r.step);
  std::printf("step %*d/%d | loss ", static_cast<int>(std::to_string(r.steps).size()), r.step,
              r.steps);
  if (interval_scored_ == 0)
    std::printf("- (no target scored)");
  else
    std::printf("%.6f", interval_loss_ / interval_scored_);
  if (interval_scored_ > 1) std::printf(" (mean of %d)", interval_scored_);
  if (!r.moe.empty())  // the MoE layers' summed losses (the same mean), the step's imbalance
    std::printf(" | aux %.4f z %.4f | imbalance %.2f", interval_aux_ / interval_steps_,
                interval_z_ / interval_steps_, moe_imbalance(r.moe));
  std::printf(" | lr %.3e | norm %.4f | %8.0f tok/s | %8.1f ms (exposed comm %.1f)", r.lr,
              r.grad_norm, r.tokens_per_s, r.step_ms, r.exposed_comm_ms);
  if (r.mfu > 1.0)  // more than the peak: the peak is wrong, not the run
    std::printf(" | MFU >100%% (peak suspect: too low)");
  else
    std::printf(" | MFU %5.1f%%", 100.0 * r.mfu);
  if (r.loss_scale != 1) std::printf(" | scale %g", r.loss_scale);
  if (r.skipped_steps > 0) std::printf(" | %lld skipped", static_cast<long long>(r.skipped_steps));
  const double step_s = 1e-3 * r.step_ms, tokens = r.tokens_per_s * step_s;
  if (r.gpu_joules >= 0 && step_s > 0 && tokens > 0)
    std::printf(" | %.0f W %.3g J/tok", r.gpu_joules / step_s, r.gpu_joules / tokens);
  std::printf(" | %s tokens | %s elapsed, ETA %s\n",
              count_text(static_cast<double>(r.tokens_seen)).c_str(), clock_text(elapsed).c_str(),
              clock_text(eta).c_str());
  std::fflush(stdout);
  interval_loss_ = interval_aux_ = interval_z_ = 0.0;
  interval_steps_ = interval_scored_ = 0;
}

void MetricsLog::eval(int step, double val_loss) {
  if (!active_) return;
  std::printf("eval at step %d | val loss %.6f\n", step, val_loss);
  report_.add_eval(step, val_loss);
  std::fflush(stdout);
  std::fprintf(file_.get(), "{\"step\": %d, \"val_loss\": %s}\n", step,
               json_number(val_loss, 9).c_str());
  std::fflush(file_.get());
  if (tensorboard_) {
    const Scalar scalars[] = {{"train/val_loss", val_loss}};
    tensorboard_->write(step, scalars);
  }
}

void MetricsLog::checkpoint_stall(double seconds) {
  if (!active_) return;
  checkpoint_stall_seconds_ += seconds;
  report_.add_checkpoint_stall(seconds);
}

void MetricsLog::checkpoint_written(double seconds, uint64_t bytes) {
  if (!active_) return;
  checkpoint_write_seconds_ += seconds;
  checkpoint_bytes_ += bytes;
  report_.add_checkpoint_written(seconds, bytes);
}

void MetricsLog::finish(const std::string& report_path, int skipped_steps, int exit_code) {
  if (active_) report_.finish(report_path, skipped_steps, exit_code, stdout);
}

}  // namespace mpitrain
