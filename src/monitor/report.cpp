#include "mpitrain/monitor/report.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>

#include "mpitrain/monitor/json_number.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

double percentile(const std::vector<double>& sorted, double p) {
  const double at = p / 100.0 * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (at - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

uint64_t step_tokens(double tokens_per_s, double step_ms) {
  const double tokens = tokens_per_s * step_ms * 1e-3;
  return std::isfinite(tokens) && tokens > 0 ? static_cast<uint64_t>(std::llround(tokens)) : 0;
}

std::string RunReport::Span::json() const {
  const double rate = tokens > 0 && seconds > 0 ? static_cast<double>(tokens) / seconds : NAN;
  return "\"first_step\": " + std::to_string(first_step) +
         ", \"last_step\": " + std::to_string(last_step) +
         ", \"tokens\": " + std::to_string(tokens) + ", \"wall_time_s\": " + json_number(seconds) +
         ", \"tokens_per_s\": " + json_number(rate);
}

std::string RunReport::Span::text() const {
  char buf[160];
  if (tokens == 0 || seconds <= 0)
    std::snprintf(buf, sizeof buf, "no steps, wall time %s", clock_text(seconds).c_str());
  else
    std::snprintf(buf, sizeof buf, "steps %d-%d, %s tokens in %s = %.0f tok/s", first_step,
                  last_step, count_text(static_cast<double>(tokens)).c_str(),
                  clock_text(seconds).c_str(), static_cast<double>(tokens) / seconds);
  return buf;
}

void RunReport::Sums::add(const StepFigures& f) {
  ++steps;
  step_ms += f.step_ms;
  tokens_per_s += f.tokens_per_s;
  mfu += f.mfu;
  forward_ms += f.forward_ms;
  backward_ms += f.backward_ms;
  optimizer_ms += f.optimizer_ms;
  exposed_comm_ms += f.exposed_comm_ms;
  data_ms += f.data_ms;
  checkpoint_ms += f.checkpoint_ms;
}

std::string clock_text(double seconds) {
  const long s = std::lround(std::max(0.0, seconds));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

std::string count_text(double n) {
  char buf[32];
  if (n >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", n);
  return buf;
}

RunReport::RunReport(int loss_window, std::chrono::steady_clock::time_point start)
    : loss_window_(static_cast<size_t>(std::max(1, loss_window))), start_(start) {}

void RunReport::add_eval(int step, double val_loss) {
  last_eval_step_ = step;
  last_val_ = val_loss;
  if (!std::isnan(val_loss) && (best_eval_step_ < 0 || val_loss < best_val_)) {
    best_eval_step_ = step;
    best_val_ = val_loss;
  }
}

void RunReport::add_step(const StepFigures& f) {
  if (f.scored) last_losses_.emplace_back(f.step, f.loss);
  if (last_losses_.size() > loss_window_) last_losses_.pop_front();
  tokens_seen_ = f.tokens_seen;
  if (first_.steps == 0) {
    first_step_ = f.step;
    segment_tokens_before_ =
        f.tokens_seen - std::min(f.tokens_seen, step_tokens(f.tokens_per_s, f.step_ms));
  }
  (first_.steps == 0 ? first_ : rest_).add(f);
  last_step_ = f.step;
  step_ms_.push_back(f.step_ms);
  tokens_per_s_.push_back(f.tokens_per_s);
  peak_rss_mib_ = std::max(peak_rss_mib_, f.peak_rss_mib);
  host_scratch_mib_ = std::max(host_scratch_mib_, f.host_scratch_mib);
}

void RunReport::add_checkpoint_stall(double seconds) { checkpoint_stall_seconds_ += seconds; }

void RunReport::add_checkpoint_written(double seconds, uint64_t bytes) {
  ++checkpoints_;
  checkpoint_write_seconds_ += seconds;
  checkpoint_bytes_ += bytes;
}

void RunReport::set_up_done() {
  set_up_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void RunReport::finish(const std::string& path, int skipped_steps, int exit_code,
                       std::FILE* out) const {
  const int total = first_.steps + rest_.steps;
  const bool warmup_out = total > 1;
  const Sums& s = warmup_out ? rest_ : first_;
  const int n = s.steps;
  // The measured steps' step times and tokens/s, ascending.
  std::vector<double> ms(step_ms_.begin() + (warmup_out ? 1 : 0), step_ms_.end());
  std::vector<double> tps(tokens_per_s_.begin() + (warmup_out ? 1 : 0), tokens_per_s_.end());
  std::sort(ms.begin(), ms.end());
  std::sort(tps.begin(), tps.end());
  const double share = n > 0 && s.step_ms > 0 ? s.exposed_comm_ms / s.step_ms : 0.0;
  const bool warn = share > kExposedCommWarnShare;
  char over[160];
  if (total == 0)
    std::snprintf(over, sizeof over, "no training steps in this run");
  else if (warmup_out)
    std::snprintf(over, sizeof over, "steps %d-%d: the run's first step (%d, warm-up) is left out",
                  first_step_ + 1, last_step_, first_step_);
  else
    std::snprintf(over, sizeof over, "step %d: the only step of the run, warm-up included",
                  last_step_);

  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> f(std::fopen(path.c_str(), "w"));
  if (!f) MPITRAIN_THROW("cannot write " + path + ": " + std::strerror(errno));
  // A statistic, or null when there is no step to compute it from or it is not finite.
  auto num = [&](double v) { return n == 0 ? std::string("null") : json_number(v); };
  const double mean = n > 0 ? 1.0 / n : 0.0;
  std::fprintf(f.get(), "{\n  \"steps\": %d,\n  \"first_step\": %d,\n  \"last_step\": %d,\n", total,
               first_step_, last_step_);
  std::fprintf(f.get(), "  \"warmup_steps_excluded\": %d,\n  \"measured_steps\": %d,\n",
               warmup_out ? 1 : 0, n);
  std::fprintf(f.get(), "  \"statistics_over\": \"%s\",\n", over);
  std::fprintf(
      f.get(),
      "  \"step_ms\": {\"mean\": %s, \"p50\": %s, \"p90\": %s, \"p99\": %s, \"max\": %s},\n",
      num(s.step_ms * mean).c_str(), num(n ? percentile(ms, 50) : 0).c_str(),
      num(n ? percentile(ms, 90) : 0).c_str(), num(n ? percentile(ms, 99) : 0).c_str(),
      num(n ? ms.back() : 0).c_str());
  std::fprintf(f.get(), "  \"tokens_per_s\": {\"mean\": %s, \"p50\": %s},\n",
               num(s.tokens_per_s * mean).c_str(), num(n ? percentile(tps, 50) : 0).c_str());
  std::fprintf(f.get(), "  \"mfu\": {\"mean\": %s%s},\n", num(s.mfu * mean).c_str(),
               mfu_of_.empty() ? "" : (", \"of\": \"" + mfu_of_ + "\"").c_str());
  std::fprintf(f.get(),
               "  \"breakdown_ms_mean\": {\"forward\": %s, \"backward\": %s, \"optimizer\": %s, "
               "\"exposed_comm\": %s, \"data\": %s, \"checkpoint_stall\": %s},\n",
               num(s.forward_ms * mean).c_str(), num(s.backward_ms * mean).c_str(),
               num(s.optimizer_ms * mean).c_str(), num(s.exposed_comm_ms * mean).c_str(),
               num(s.data_ms * mean).c_str(), num(s.checkpoint_ms * mean).c_str());
  std::fprintf(f.get(), "  \"exposed_comm_share\": %s,\n  \"exposed_comm_warning\": %s,\n",
               num(share).c_str(), warn ? "true" : "false");
  std::fprintf(f.get(), "  \"peak_rss_mib\": %s,\n  \"host_scratch_mib\": %s,\n",
               num(peak_rss_mib_).c_str(), num(host_scratch_mib_).c_str());
  std::fprintf(f.get(), "  \"skipped_steps\": %d,\n", skipped_steps);
  std::fprintf(f.get(),
               "  \"checkpoints\": {\"written\": %d, \"stall_seconds\": %.6g, "
               "\"write_seconds\": %.6g, \"bytes\": %llu},\n",
               checkpoints_, checkpoint_stall_seconds_, checkpoint_write_seconds_,
               static_cast<unsigned long long>(checkpoint_bytes_));
  double final_loss = 0.0;
  for (const auto& [step, l] : last_losses_)
    final_loss += l / static_cast<double>(last_losses_.size());
  const bool has_loss = !last_losses_.empty(), has_val = last_eval_step_ >= 0;
  const int loss_from = has_loss ? last_losses_.front().first : 0;
  const int loss_to = has_loss ? last_losses_.back().first : 0;
  // steps in [loss_from, loss_to] that scored no target (none without a loss mask)
  const int unscored = loss_to - loss_from + 1 - static_cast<int>(last_losses_.size());
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(f.get(),
               "  \"final_train_loss\": {\"mean\": %s, \"first_step\": %d, \"last_step\": %d},\n",
               has_loss ? json_number(final_loss).c_str() : "null", loss_from, loss_to);
  std::fprintf(f.get(),
               "  \"val_loss\": {\"last\": %s, \"last_step\": %d, \"best\": %s, "
               "\"best_step\": %d},\n",
               has_val ? json_number(last_val_).c_str() : "null", last_eval_step_,
               has_val ? json_number(best_val_).c_str() : "null", best_eval_step_);
  // This segment's and the whole run's tokens and wall time, each rate of its own figures.
  const bool earlier = earlier_.count > 0;
  const uint64_t seen = total > 0 ? tokens_seen_ : earlier_.tokens_seen;
  const Span segment{total > 0 ? first_step_ : 0, total > 0 ? last_step_ : 0,
                     total > 0 ? tokens_seen_ - segment_tokens_before_ : 0, wall};
  const Span run{earlier ? earlier_.first_step : segment.first_step,
                 total > 0 ? last_step_ : earlier_.resumed_step,
                 seen - (earlier ? earlier_.tokens_before : segment_tokens_before_),
                 earlier_.seconds + wall};
  std::fprintf(f.get(), "  \"tokens_seen\": %llu,\n", static_cast<unsigned long long>(seen));
  std::fprintf(f.get(), "  \"setup_s\": %s,\n",
               set_up_seconds_ < 0 ? "null" : json_number(set_up_seconds_).c_str());
  std::fprintf(f.get(), "  \"segment\": {\"number\": %d, %s},\n", earlier_.count + 1,
               segment.json().c_str());
  std::fprintf(f.get(), "  \"run\": {\"segments\": %d, %s},\n", earlier_.count + 1,
               run.json().c_str());
  std::fprintf(f.get(), "  \"stopped_early\": %s,\n  \"exit_code\": %d\n}\n",
               exit_code != kExitOk ? "true" : "false", exit_code);
  std::FILE* raw = f.release();
  if (std::ferror(raw) || std::fclose(raw) != 0)
    MPITRAIN_THROW("cannot write " + path + ": " + std::strerror(errno));

  std::fprintf(out, "---- summary: %s\n", over);
  if (n > 0) {
    std::fprintf(out, "step time   mean %.2f ms | p50 %.2f | p90 %.2f | p99 %.2f | max %.2f\n",
                 s.step_ms * mean, percentile(ms, 50), percentile(ms, 90), percentile(ms, 99),
                 ms.back());
    std::fprintf(out, "throughput  mean %.0f tok/s | p50 %.0f tok/s | MFU mean %.1f%%%s\n",
                 s.tokens_per_s * mean, percentile(tps, 50), 100.0 * s.mfu * mean,
                 mfu_of_.empty() ? "" : (" (of " + mfu_of_ + ")").c_str());
    std::fprintf(out,
                 "time (mean ms)  forward %.2f | backward %.2f | optimizer %.2f | exposed comm "
                 "%.2f | data %.2f | checkpoint stall %.2f\n",
                 s.forward_ms * mean, s.backward_ms * mean, s.optimizer_ms * mean,
                 s.exposed_comm_ms * mean, s.data_ms * mean, s.checkpoint_ms * mean);
    std::fprintf(out,
                 "peak RSS %.1f MiB, host scratch %.1f MiB (each the largest rank's) | exposed "
                 "communication %.1f%% of the step time\n",
                 peak_rss_mib_, host_scratch_mib_, 100.0 * share);
  }
  if (has_loss) {
    std::fprintf(out, "loss        final train %.6f (", final_loss);
    if (loss_from == loss_to)
      std::fprintf(out, "step %d)", loss_to);
    else
      std::fprintf(out, "mean of steps %d-%d%s)", loss_from, loss_to,
                   unscored > 0 ? ", those that scored a target" : "");
    if (has_val)
      std::fprintf(out, " | val last %.6f (step %d), best %.6f (step %d)", last_val_,
                   last_eval_step_, best_val_, best_eval_step_);
    std::fprintf(out, "\n");
  } else if (has_val) {
    std::fprintf(out, "loss        val %.6f (step %d)\n", last_val_, last_eval_step_);
  }
  std::fprintf(out, "run         %llu tokens seen | ", static_cast<unsigned long long>(seen));
  if (set_up_seconds_ >= 0) std::fprintf(out, "set-up %.1f s | ", set_up_seconds_);
  if (earlier)
    std::fprintf(out, "segment %d: %s | all %d segments: %s\n", earlier_.count + 1,
                 segment.text().c_str(), earlier_.count + 1, run.text().c_str());
  else
    std::fprintf(out, "%s\n", segment.text().c_str());
  std::fprintf(out,
               "skipped steps %d | checkpoints written %d (%.2f GB, writing %.2f s, the steps "
               "stalled %.2f s) | report %s\n",
               skipped_steps, checkpoints_, static_cast<double>(checkpoint_bytes_) / 1e9,
               checkpoint_write_seconds_, checkpoint_stall_seconds_, path.c_str());
  if (warn)
    std::fprintf(out,
                 "WARNING: exposed communication is %.1f%% of the step time (more than "
                 "%.0f%%): the ranks wait on each other; see the trace (--trace) for where\n",
                 100.0 * share, 100.0 * kExposedCommWarnShare);
  std::fflush(out);
}

}  // namespace mpitrain
