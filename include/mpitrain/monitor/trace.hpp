// A per-rank timeline in the Chrome trace format (chrome://tracing, https://ui.perfetto.dev).
//
// <dir>/trace-rank<R>.json is a JSON array of events: complete events ("ph": "X", ts and dur in
// microseconds since the common start) with pid = rank and tid = lane (0 compute, 1 comm, 2 data,
// 3 io), preceded by metadata events naming the process and the four lanes. Events go into a
// buffer reserved up front and reach the file when it is full and at close(), so recording
// allocates nothing in steady state; a recorder that is off costs one branch per scope.
// tools/trace_merge.cpp joins the ranks' files into one timeline.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/comm/communicator.hpp"

namespace mpitrain {

enum class TraceLane { Compute = 0, Comm = 1, Data = 2, Io = 3 };

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  TraceRecorder() = default;  // off until open()
  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;
  ~TraceRecorder();  // close(), reporting a failure on stderr

  // Starts recording into <dir>/trace-rank<rank>.json (dir created if needed); label names the
  // process in the viewer. capacity: events buffered before a write. Throws UsageError when the
  // file cannot be created.
  void open(const std::string& dir, int rank, const std::string& label, size_t capacity = 16384);
  // The zero of the timeline, taken right after a barrier over every rank so that the ranks'
  // timelines line up (to within the barrier's skew). Collective when on; nothing when off.
  void start(Communicator& world);
  bool on() const { return file_ != nullptr; }
  // One region [begin, end) on a lane. name: a string literal (kept by pointer, written as is);
  // index >= 0 is shown as the event's argument "i" (micro-batch, step).
  void add(TraceLane lane, const char* name, Clock::time_point begin, Clock::time_point end,
           int index = -1);
  // Writes the buffered events and ends the JSON array. Idempotent.
  void close();

 private:
  struct Event {
    const char* name;
    Clock::time_point begin, end;
    int index;
    TraceLane lane;
  };
  void write_buffered();
  void put(const char* text);  // one event's JSON, comma-separated from the previous one

  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::unique_ptr<std::FILE, Close> file_;
  std::string path_;
  int rank_ = 0;
  bool first_ = true;
  Clock::time_point origin_;
  std::vector<Event> events_;
};

// Times its own scope: records it on the recorder when that is on, and adds its seconds to
// *seconds when given (the per-step time breakdown). With neither it reads no clock.
class TraceScope {
 public:
  TraceScope(TraceRecorder* trace, TraceLane lane, const char* name, double* seconds = nullptr,
             int index = -1)
      : trace_(trace && trace->on() ? trace : nullptr),
        seconds_(seconds),
        name_(name),
        index_(index),
        lane_(lane) {
    if (trace_ || seconds_) begin_ = TraceRecorder::Clock::now();
  }
  ~TraceScope() {
    if (!trace_ && !seconds_) return;
    const TraceRecorder::Clock::time_point end = TraceRecorder::Clock::now();
    if (seconds_) *seconds_ += std::chrono::duration<double>(end - begin_).count();
    if (trace_) trace_->add(lane_, name_, begin_, end, index_);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  TraceRecorder* trace_;
  double* seconds_;
  const char* name_;
  int index_;
  TraceLane lane_;
  TraceRecorder::Clock::time_point begin_;
};

}  // namespace mpitrain
