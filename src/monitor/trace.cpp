#include "mpitrain/monitor/trace.hpp"

#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>

#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

const char* const kLaneNames[] = {"compute", "comm", "data", "io"};

std::string json_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) >= 0x20) out.push_back(c);
  }
  return out;
}

}  // namespace

TraceRecorder::~TraceRecorder() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace: %s\n", e.what());
  }
}

void TraceRecorder::open(const std::string& dir, int rank, const std::string& label,
                         size_t capacity) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  require(!ec, "cannot create trace directory " + dir + ": " + ec.message());
  path_ = (fs::path(dir) / ("trace-rank" + std::to_string(rank) + ".json")).string();
  file_.reset(std::fopen(path_.c_str(), "w"));
  require(file_ != nullptr, "cannot write " + path_ + ": " + std::strerror(errno));
  rank_ = rank;
  first_ = true;
  origin_ = Clock::now();
  events_.clear();
  events_.reserve(capacity);
  if (std::fputs("[\n", file_.get()) < 0)
    MPITRAIN_THROW("cannot write " + path_ + ": " + std::strerror(errno));
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                "\"args\": {\"name\": \"%s\"}}",
                rank, json_escaped(label).c_str());
  put(buf);
  std::snprintf(buf, sizeof buf,
                "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, "
                "\"args\": {\"sort_index\": %d}}",
                rank, rank);
  put(buf);
  for (int lane = 0; lane < 4; ++lane) {
    std::snprintf(buf, sizeof buf,
                  "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                  "\"args\": {\"name\": \"%s\"}}",
                  rank, lane, kLaneNames[lane]);
    put(buf);
    std::snprintf(buf, sizeof buf,
                  "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
                  "\"args\": {\"sort_index\": %d}}",
                  rank, lane, lane);
    put(buf);
  }
}

void TraceRecorder::start(Communicator& world) {
  if (!on()) return;
  world.barrier();
  origin_ = Clock::now();
}

void TraceRecorder::add(TraceLane lane, const char* name, Clock::time_point begin,
                        Clock::time_point end, int index) {
  if (!on()) return;
  if (events_.size() == events_.capacity()) write_buffered();
  events_.push_back({name, begin, end, index, lane});
}

void TraceRecorder::put(const char* text) {
  if (std::fprintf(file_.get(), "%s%s", first_ ? "" : ",\n", text) < 0)
    MPITRAIN_THROW("cannot write " + path_ + ": " + std::strerror(errno));
  first_ = false;
}

void TraceRecorder::write_buffered() {
  char buf[256];
  for (const Event& e : events_) {
    const double ts = std::chrono::duration<double, std::micro>(e.begin - origin_).count();
    const double dur = std::chrono::duration<double, std::micro>(e.end - e.begin).count();
    const int lane = static_cast<int>(e.lane);
    int n = std::snprintf(buf, sizeof buf,
                          "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, "
                          "\"tid\": %d, \"ts\": %.3f, \"dur\": %.3f",
                          e.name, kLaneNames[lane], rank_, lane, ts, dur);
    if (e.index >= 0)
      n += std::snprintf(buf + n, sizeof buf - n, ", \"args\": {\"i\": %d}", e.index);
    std::snprintf(buf + n, sizeof buf - n, "}");
    put(buf);
  }
  events_.clear();
}

void TraceRecorder::close() {
  if (!on()) return;
  write_buffered();
  const bool ok = std::fprintf(file_.get(), "\n]\n") >= 0;
  std::FILE* f = file_.release();
  if (!ok || std::fclose(f) != 0)
    MPITRAIN_THROW("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace mpitrain
