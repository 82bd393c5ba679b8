// Scalar summaries in TensorBoard's event-file format, written without TensorFlow.
//
// File <dir>/events.out.tfevents.<unix time>.<hostname>[.<n>]: a sequence of TFRecords
//   uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
// (little-endian), each data an Event protobuf (tensorflow/core/util/event.proto):
//   Event      { double wall_time = 1; int64 step = 2; oneof { string file_version = 3;
//                Summary summary = 5; SessionLog session_log = 7; } }
//   SessionLog { SessionStatus status = 1; }          (START = 1)
//   Summary    { repeated Value value = 1; }          (tensorflow/core/framework/summary.proto)
//   Value      { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2", the second a SessionLog START at the
// first step this run writes; then one Event per write(). A resumed run writes a new file, and
// the START is TensorBoard's restart convention: reading the files in name (= start) order, its
// loader drops every event read before at step >= the START's step (EventAccumulator's
// _CheckForRestartAndMaybePurge), so the steps a stopped run logged after the checkpoint it is
// resumed from are shown once, as metrics.jsonl keeps them (train/metrics.hpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>

namespace mpitrain {

struct Scalar {
  const char* tag;
  double value;  // stored as float, as TensorBoard's simple_value is
};

class TensorBoardWriter {
 public:
  // Creates dir if needed and a new event file in it, whose session starts at first_step (the
  // step of the first write to come: 1, or the checkpoint's step + 1 on a resume). Throws
  // UsageError when it cannot.
  TensorBoardWriter(const std::string& dir, int64_t first_step);
  const std::string& path() const { return path_; }
  // One Event at `step` with every scalar of the list; flushed, so TensorBoard sees it at once.
  void write(int64_t step, std::span<const Scalar> scalars);

 private:
  void put_record(const std::string& data);  // one TFRecord

  struct Close {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Close> file_;
  std::string event_, summary_, value_;  // encoding buffers, reused from step to step
};

}  // namespace mpitrain
