// TensorBoard event files: decoded here by an independent reader (its own bitwise CRC-32C, its
// own protobuf decoding), which checks both CRCs of every record and every value written; a
// run's directory read as TensorBoard's EventAccumulator reads it (the restart purge).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "mpitrain/monitor/crc32c.hpp"
#include "mpitrain/monitor/tensorboard.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;
namespace fs = std::filesystem;

namespace {

// CRC-32C bit by bit (no table), straight from the definition.
uint32_t crc32c_bitwise(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint64_t le(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

struct Event {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version;
  int session_status = -1;  // SessionLog.status where the event holds one (START = 1)
  std::map<std::string, float> values;
};

// Protobuf decoding of just what an Event with scalars holds; fails the test on anything else.
class Decoder {
 public:
  Decoder(const uint8_t* p, size_t n) : p_(p), end_(p + n) {}
  bool done() const { return p_ == end_; }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      EXPECT_LT(p_, end_);
      if (p_ >= end_ || shift > 63) return v;
      const uint8_t b = *p_++;
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
  }
  uint64_t fixed(int bytes) {
    EXPECT_LE(static_cast<ptrdiff_t>(bytes), end_ - p_);
    const uint64_t v = le(p_, bytes);
    p_ += bytes;
    return v;
  }
  Decoder sub() {  // a length-delimited field's bytes
    const uint64_t n = varint();
    EXPECT_LE(n, static_cast<uint64_t>(end_ - p_));
    Decoder d(p_, n);
    p_ += n;
    return d;
  }
  std::string bytes() {
    Decoder d = sub();
    return std::string(reinterpret_cast<const char*>(d.p_), d.end_ - d.p_);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

Event decode_event(const uint8_t* p, size_t n) {
  Event e;
  Decoder d(p, n);
  while (!d.done()) {
    const uint64_t key = d.varint();
    switch (key) {
      case (1 << 3) | 1: {  // wall_time, double
        const uint64_t bits = d.fixed(8);
        std::memcpy(&e.wall_time, &bits, 8);
        break;
      }
      case (2 << 3) | 0:
        e.step = static_cast<int64_t>(d.varint());
        break;  // step
      case (3 << 3) | 2:
        e.file_version = d.bytes();
        break;              // file_version
      case (7 << 3) | 2: {  // session_log
        Decoder log = d.sub();
        while (!log.done()) {
          EXPECT_EQ(log.varint(), (1u << 3) | 0);  // SessionStatus status = 1
          e.session_status = static_cast<int>(log.varint());
        }
        break;
      }
      case (5 << 3) | 2: {  // summary
        Decoder summary = d.sub();
        while (!summary.done()) {
          EXPECT_EQ(summary.varint(), (1u << 3) | 2);  // repeated Value value = 1
          Decoder value = summary.sub();
          std::string tag;
          float v = 0;
          while (!value.done()) {
            const uint64_t k = value.varint();
            if (k == ((1 << 3) | 2)) {
              tag = value.bytes();
            } else {
              EXPECT_EQ(k, (2u << 3) | 5);  // simple_value, float
              const uint32_t bits = static_cast<uint32_t>(value.fixed(4));
              std::memcpy(&v, &bits, 4);
            }
          }
          e.values[tag] = v;
        }
        break;
      }
      default:
        ADD_FAILURE() << "unexpected field key " << key;
        return e;
    }
  }
  return e;
}

// Every record of a TFRecord file, both CRCs checked.
std::vector<Event> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> f((std::istreambuf_iterator<char>(in)),
                               std::istreambuf_iterator<char>());
  std::vector<Event> events;
  size_t at = 0;
  while (at < f.size()) {
    EXPECT_GE(f.size() - at, 12u) << "truncated record header at " << at;
    if (f.size() - at < 12) break;
    const uint64_t n = le(&f[at], 8);
    EXPECT_EQ(le(&f[at + 8], 4), masked(crc32c_bitwise(&f[at], 8))) << "length CRC at " << at;
    EXPECT_GE(f.size() - at - 12, n + 4) << "truncated record at " << at;
    if (f.size() - at - 12 < n + 4) break;
    const uint8_t* data = &f[at + 12];
    EXPECT_EQ(le(data + n, 4), masked(crc32c_bitwise(data, n))) << "data CRC at " << at;
    events.push_back(decode_event(data, n));
    at += 12 + n + 4;
  }
  return events;
}

// One tag's points of a run directory as TensorBoard's EventAccumulator (purge_orphaned_data, its
// default) keeps them: the files in name order; once a file_version >= 2 is seen, a SessionLog
// START at step s drops every point kept so far at a step >= s (_CheckForRestartAndMaybePurge).
std::map<int64_t, float> tensorboard_points(const fs::path& dir, const std::string& tag) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& f : fs::directory_iterator(dir))
    if (f.path().filename().string().find("tfevents") != std::string::npos)
      files.push_back(f.path());
  std::sort(files.begin(), files.end());
  std::vector<std::pair<int64_t, float>> points;  // in reading order, as the accumulator's
  bool version2 = false;
  for (const fs::path& f : files)
    for (const Event& e : read_events(f.string())) {
      version2 |= e.file_version == "brain.Event:2";
      if (version2 && e.session_status == 1)
        std::erase_if(points, [&](const auto& p) { return p.first >= e.step; });
      if (e.values.count(tag)) points.emplace_back(e.step, e.values.at(tag));
    }
  std::map<int64_t, float> by_step;
  for (const auto& [step, value] : points)
    EXPECT_TRUE(by_step.emplace(step, value).second) << tag << " twice at step " << step;
  return by_step;
}

class TensorBoardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "mpitrain-tb-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

}  // namespace

TEST(Crc32c, KnownAnswers) {
  const char* check = "123456789";
  EXPECT_EQ(crc32c_bitwise(reinterpret_cast<const uint8_t*>(check), 9), 0xE3069283u);
  EXPECT_EQ(crc32c(check, 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros -> 0x8A9136AA, of 0xFF -> 0x62A8AB43.
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(masked_crc32c(check, 9), masked(0xE3069283u));
  std::vector<uint8_t> bytes(1000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  EXPECT_EQ(crc32c(bytes.data(), bytes.size()), crc32c_bitwise(bytes.data(), bytes.size()));
}

TEST_F(TensorBoardTest, ScalarsRoundTrip) {
  const double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string path;
  {
    TensorBoardWriter tb((dir_ / "tb").string(), 1);
    path = tb.path();
    const Scalar first[] = {
        {"train/loss", 5.545177444479562}, {"train/lr", 3e-4}, {"perf/tokens_per_s", 123456.0}};
    tb.write(1, first);
    const Scalar second[] = {{"train/loss", 4.25}, {"time/forward_ms", 0.125}};
    tb.write(2, second);
    const Scalar val[] = {{"train/val_loss", 4.5}};
    tb.write(1000000000000LL, val);  // a step beyond 32 bits: multi-byte varint
  }
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  const std::string name = fs::path(path).filename().string();
  const std::string prefix = "events.out.tfevents.", suffix = std::string(".") + host;
  ASSERT_EQ(name.rfind(prefix, 0), 0u) << name;
  ASSERT_GT(name.size(), prefix.size() + suffix.size());
  EXPECT_EQ(name.substr(name.size() - suffix.size()), suffix) << name;
  const std::string stamp = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  EXPECT_NEAR(std::stod(stamp), before, 5.0);

  const std::vector<Event> events = read_events(path);
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].values.empty());
  for (const Event& e : events) EXPECT_NEAR(e.wall_time, before, 5.0);
  EXPECT_EQ(events[1].session_status, 1);  // START, at the first step to come
  EXPECT_EQ(events[1].step, 1);
  EXPECT_TRUE(events[1].values.empty());
  EXPECT_EQ(events[2].step, 1);
  ASSERT_EQ(events[2].values.size(), 3u);
  EXPECT_EQ(events[2].values.at("train/loss"), static_cast<float>(5.545177444479562));
  EXPECT_EQ(events[2].values.at("train/lr"), static_cast<float>(3e-4));
  EXPECT_EQ(events[2].values.at("perf/tokens_per_s"), 123456.0f);
  EXPECT_EQ(events[3].step, 2);
  ASSERT_EQ(events[3].values.size(), 2u);
  EXPECT_EQ(events[3].values.at("train/loss"), 4.25f);
  EXPECT_EQ(events[3].values.at("time/forward_ms"), 0.125f);
  EXPECT_EQ(events[4].step, 1000000000000LL);
  EXPECT_EQ(events[4].values.at("train/val_loss"), 4.5f);
}

// A run stopped after step 7 and resumed from its checkpoint of step 3 (steps 4-8 again): a
// second file, after the first in name order even within the same second, whose START hides
// the stopped run's steps 4-7, so TensorBoard shows each of the 8 steps once, the newer values.
TEST_F(TensorBoardTest, ResumedRunShowsEachStepOnce) {
  std::string first, second;
  {
    TensorBoardWriter stopped(dir_.string(), 1);
    first = stopped.path();
    for (int step = 1; step <= 7; ++step) {
      const Scalar s[] = {{"train/loss", 10.0 + step}};
      stopped.write(step, s);
    }
  }
  {
    TensorBoardWriter resumed(dir_.string(), 4);
    second = resumed.path();
    for (int step = 4; step <= 8; ++step) {
      const Scalar s[] = {{"train/loss", 20.0 + step}};
      resumed.write(step, s);
    }
  }
  ASSERT_NE(first, second);
  EXPECT_LT(first, second) << "the resumed run's file must sort after the stopped run's";
  const std::map<int64_t, float> loss = tensorboard_points(dir_, "train/loss");
  ASSERT_EQ(loss.size(), 8u);  // 12 without the purge
  for (int step = 1; step <= 8; ++step)
    EXPECT_EQ(loss.at(step), step <= 3 ? 10.0f + step : 20.0f + step) << "step " << step;
}

TEST_F(TensorBoardTest, CorruptedRecordIsCaughtByTheReader) {
  std::string path;
  {
    TensorBoardWriter tb(dir_.string(), 1);
    path = tb.path();
    const Scalar s[] = {{"train/loss", 1.0}};
    tb.write(1, s);
  }
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-6, std::ios::end);  // inside the last record's data (the float)
    f.put('\x55');
  }
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    read_events(path);
  }
  bool data_crc = false;
  for (int i = 0; i < failures.size(); ++i)
    data_crc |=
        std::string(failures.GetTestPartResult(i).message()).find("data CRC") != std::string::npos;
  EXPECT_TRUE(data_crc) << "the reader did not notice a changed byte";
}

TEST_F(TensorBoardTest, UnwritableDirectoryIsAUsageError) {
  std::ofstream(dir_ / "file") << "x";
  EXPECT_THROW(TensorBoardWriter((dir_ / "file" / "tb").string(), 1), UsageError);
}
