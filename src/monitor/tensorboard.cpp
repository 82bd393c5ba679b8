#include "mpitrain/monitor/tensorboard.hpp"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "mpitrain/monitor/crc32c.hpp"
#include "mpitrain/runtime/error.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// Protobuf wire format: key = field << 3 | wire type (0 varint, 1 fixed64, 2 bytes, 5 fixed32).
void put_varint(std::string& out, uint64_t v) {
  for (; v >= 0x80; v >>= 7) out.push_back(static_cast<char>((v & 0x7F) | 0x80));
  out.push_back(static_cast<char>(v));
}

void put_fixed(std::string& out, uint64_t bits, int bytes) {  // little-endian
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xFF));
}

void put_bytes(std::string& out, int field, const char* data, size_t n) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);
  put_varint(out, n);
  out.append(data, n);
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, 8);
  put_varint(out, static_cast<uint64_t>(field) << 3 | 1);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  put_varint(out, static_cast<uint64_t>(field) << 3 | 5);
  put_fixed(out, bits, 4);
}

void put_int64(std::string& out, int field, int64_t v) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 0);
  put_varint(out, static_cast<uint64_t>(v));
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t first_step) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  require(!ec, "cannot create tensorboard directory " + dir + ": " + ec.message());
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  // A new file, never an earlier one (two runs started within a second): ".1", ".2", ... after
  // the name, which keeps the files in start order when sorted by name, as TensorBoard reads them.
  const std::string name = "events.out.tfevents." + std::to_string(std::time(nullptr)) + "." + host;
  for (int n = 0; !file_; ++n) {
    path_ = (fs::path(dir) / (n == 0 ? name : name + "." + std::to_string(n))).string();
    file_.reset(std::fopen(path_.c_str(), "wbx"));
    require(file_ != nullptr || errno == EEXIST,
            "cannot write " + path_ + ": " + std::strerror(errno));
  }
  static constexpr char kVersion[] = "brain.Event:2";
  event_.clear();
  put_double(event_, 1, wall_seconds());
  put_int64(event_, 2, 0);
  put_bytes(event_, 3, kVersion, sizeof kVersion - 1);
  put_record(event_);
  // SessionLog { status = START (1) } at first_step: TensorBoard drops what earlier files hold at
  // steps >= first_step.
  std::string session_log;
  put_int64(session_log, 1, 1);
  event_.clear();
  put_double(event_, 1, wall_seconds());
  put_int64(event_, 2, first_step);
  put_bytes(event_, 7, session_log.data(), session_log.size());
  put_record(event_);
}

void TensorBoardWriter::write(int64_t step, std::span<const Scalar> scalars) {
  summary_.clear();
  for (const Scalar& s : scalars) {
    value_.clear();
    put_bytes(value_, 1, s.tag, std::strlen(s.tag));
    put_float(value_, 2, static_cast<float>(s.value));
    put_bytes(summary_, 1, value_.data(), value_.size());
  }
  event_.clear();
  put_double(event_, 1, wall_seconds());
  put_int64(event_, 2, step);
  put_bytes(event_, 5, summary_.data(), summary_.size());
  put_record(event_);
}

void TensorBoardWriter::put_record(const std::string& data) {
  unsigned char head[12];
  const uint64_t n = data.size();
  for (int i = 0; i < 8; ++i) head[i] = static_cast<unsigned char>(n >> (8 * i));
  const uint32_t len_crc = masked_crc32c(head, 8), data_crc = masked_crc32c(data.data(), n);
  for (int i = 0; i < 4; ++i) head[8 + i] = static_cast<unsigned char>(len_crc >> (8 * i));
  unsigned char tail[4];
  for (int i = 0; i < 4; ++i) tail[i] = static_cast<unsigned char>(data_crc >> (8 * i));
  if (std::fwrite(head, 1, 12, file_.get()) != 12 ||
      std::fwrite(data.data(), 1, n, file_.get()) != n ||
      std::fwrite(tail, 1, 4, file_.get()) != 4 || std::fflush(file_.get()) != 0)
    MPITRAIN_THROW("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace mpitrain
