// Scalar summaries in TensorBoard's event-file format, written without TensorFlow.
//
// File <dir>/events.out.tfevents.<unix time>.<hostname>: a sequence of TFRecords
//   uint64 length | uint32 masked_crc32c(length) | data[length] | uint32 masked_crc32c(data)
// (little-endian), each data an Event protobuf (tensorflow/core/util/event.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }          (tensorflow/core/framework/summary.proto)
//   Value   { string tag = 1; float simple_value = 2; }
// The first record carries file_version "brain.Event:2"; then one Event per write().
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
  // Creates dir if needed and a new event file in it. Throws UsageError when it cannot.
  explicit TensorBoardWriter(const std::string& dir);
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
