#include "mpitrain/monitor/peak_cache.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <utility>

#include "mpitrain/backend/bf16_gemm_rate.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/runtime/affinity.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// Plain Error without file:line: these texts reach the user as notes, not as failures.
[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw Error(what + " " + path + ": " + std::strerror(errno));
}

class Fd {  // an open file descriptor, closed on destruction
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// An exclusive fcntl lock on `path` (created if need be), held until destruction. It is a file
// of its own because the cache file is replaced by rename, which would leave a lock on it behind.
class FileLock {
 public:
  explicit FileLock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_.get() < 0) fail("cannot open", path);
    struct flock whole {};
    whole.l_type = F_WRLCK;
    whole.l_whence = SEEK_SET;
    while (::fcntl(fd_.get(), F_SETLKW, &whole) != 0)
      if (errno != EINTR) fail("cannot lock", path);
  }

 private:
  Fd fd_;  // closing it releases the lock
};

// A file created beside `path`, removed on destruction unless renamed over `path`.
class TempFile {
 public:
  explicit TempFile(const std::string& path)
      : path_(path), name_(path + ".XXXXXX"), fd_(::mkstemp(name_.data())) {
    if (fd_.get() < 0) fail("cannot create", name_);
  }
  ~TempFile() {
    if (!renamed_) ::unlink(name_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write_all(const std::string& text) {
    for (size_t done = 0; done < text.size();) {
      const ssize_t n = ::write(fd_.get(), text.data() + done, text.size() - done);
      if (n < 0 && errno != EINTR) fail("cannot write", name_);
      if (n > 0) done += static_cast<size_t>(n);
    }
  }
  void rename_over() {
    if (::fsync(fd_.get()) != 0) fail("cannot fsync", name_);
    if (::close(fd_.release()) != 0) fail("cannot close", name_);
    if (::rename(name_.c_str(), path_.c_str()) != 0) fail("cannot rename " + name_ + " to", path_);
    renamed_ = true;
  }

 private:
  std::string path_, name_;
  Fd fd_;
  bool renamed_ = false;
};

void create_parent(const std::string& path) {
  const fs::path dir = fs::path(path).parent_path();
  std::error_code ec;
  if (!dir.empty()) fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create " + dir.string() + ": " + ec.message());
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') out += '\\';
    if (u >= 0x20) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", u);
      out += escaped;
    }
  }
  return out + "\"";
}

std::string fixed(double x, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, x);
  return text;
}

std::string entry_line(const PeakEntry& e) {
  return "{\"host\":" + json_string(e.key.host) + ",\"cpu\":" + json_string(e.key.cpu_model) +
         ",\"threads\":" + std::to_string(e.key.threads) +
         ",\"cpus\":" + std::to_string(e.key.cpus) + ",\"gemm\":" + json_string(e.key.gemm) +
         ",\"kind\":" + json_string(e.key.kind) + ",\"gflops\":" + fixed(e.gflops, 1) +
         (e.busy > 0 ? ",\"busy\":" + fixed(e.busy, 2) : "") +
         ",\"date\":" + json_string(e.date) + "}\n";
}

PeakEntry parse_entry(const std::string& line) {
  nlohmann::json v;
  try {
    v = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("not JSON: ") + e.what());
  }
  // The member `name`; null where it is absent or the line is not an object.
  auto member = [&](const char* name) {
    const auto f = v.find(name);
    return f != v.end() ? *f : nlohmann::json();
  };
  auto string = [&](const char* name) {
    const nlohmann::json f = member(name);
    if (!f.is_string()) throw Error(std::string("no valid \"") + name + "\"");
    return f.get<std::string>();
  };
  auto number = [&](const char* name) {
    const nlohmann::json f = member(name);
    if (!f.is_number()) throw Error(std::string("no valid \"") + name + "\"");
    return f.get<double>();
  };
  // An optional string member: `absent` where the line has none.
  auto optional_string = [&](const char* name, const char* absent) {
    const auto f = v.find(name);
    if (f != v.end() && !f->is_string()) throw Error(std::string("bad \"") + name + "\"");
    return f != v.end() ? f->get<std::string>() : std::string(absent);
  };
  auto count = [&](const char* name) {
    const double x = number(name);
    if (!(x >= 1 && x <= 1e6 && x == std::floor(x)))
      throw Error(std::string("bad \"") + name + "\"");
    return static_cast<int>(x);
  };
  PeakEntry e;
  e.key.host = string("host");
  e.key.cpu_model = string("cpu");
  e.key.threads = count("threads");
  e.key.cpus = count("cpus");
  e.key.gemm = optional_string("gemm", kOldCpuGemm);
  e.key.kind = optional_string("kind", kFp32Peak);
  e.gflops = number("gflops");
  if (!(e.gflops > 0 && std::isfinite(e.gflops))) throw Error("bad \"gflops\"");
  if (v.is_object() && v.contains("busy")) {
    e.busy = number("busy");
    if (!(e.busy > 0 && e.busy <= 1e3)) throw Error("bad \"busy\"");
  }
  e.date = string("date");
  return e;
}

std::string utc_minute_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  if (now == static_cast<std::time_t>(-1) || gmtime_r(&now, &tm) == nullptr)
    throw Error(std::string("cannot read the clock: ") + std::strerror(errno));
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%MZ", &tm);
  return text;
}

// Adds `mine` to what the file holds now, under the lock, in place of a lower entry of its key;
// an entry as high or higher (another host's process may have stored one since) stays.
void store(const std::string& path, const PeakEntry& mine) {
  create_parent(path);
  const FileLock lock(path + ".lock");
  std::vector<PeakEntry> entries;
  try {
    entries = read_peak_cache(path);
  } catch (const Error&) {  // replaced: the first read put the reason in Peak::note
  }
  std::erase_if(entries,
                [&](const PeakEntry& e) { return e.key == mine.key && e.gflops < mine.gflops; });
  if (std::none_of(entries.begin(), entries.end(),
                   [&](const PeakEntry& e) { return e.key == mine.key; }))
    entries.push_back(mine);
  write_peak_cache(path, entries);
}

// Waits for every rank of comm, sleeping between polls: a rank spinning in MPI would take a
// CPU from the rank that is measuring.
void barrier_sleeping(const MpiComm& comm) {
  MPI_Request request = MPI_REQUEST_NULL;
  MPI_CHECK(MPI_Ibarrier(comm.get(), &request));
  for (int done = 0;;) {
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void bcast_string(const MpiComm& comm, std::string& s, int root) {
  int length = static_cast<int>(s.size());
  MPI_CHECK(MPI_Bcast(&length, 1, MPI_INT, root, comm.get()));
  s.resize(length);
  MPI_CHECK(MPI_Bcast(s.data(), length, MPI_CHAR, root, comm.get()));
}

}  // namespace

std::string peak_cache_path(const char* override_path, const char* xdg_cache_home,
                            const char* home) {
  auto set = [](const char* v) { return v != nullptr && *v != '\0'; };
  if (set(override_path)) return override_path;
  if (set(xdg_cache_home))
    return (fs::path(xdg_cache_home) / "mpitrain/peak-gflops.jsonl").string();
  if (set(home)) return (fs::path(home) / ".cache/mpitrain/peak-gflops.jsonl").string();
  return "";
}

std::string cpu_model_name(const std::string& cpuinfo) {
  std::ifstream in(cpuinfo);
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (line.rfind("model name", 0) != 0 || colon == std::string::npos) continue;
    const size_t begin = line.find_first_not_of(" \t", colon + 1);
    const size_t end = line.find_last_not_of(" \t");
    if (begin != std::string::npos) return line.substr(begin, end + 1 - begin);
  }
  return "unknown";  // no such file, or a CPU whose kernel names no model (some ARM ones)
}

std::vector<PeakEntry> read_peak_cache(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    if (errno == ENOENT) return {};
    fail("cannot read", path);
  }
  std::vector<PeakEntry> entries;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    try {
      entries.push_back(parse_entry(line));
    } catch (const Error& e) {
      throw Error(path + " line " + std::to_string(number) + ": " + e.what());
    }
  }
  if (in.bad()) fail("cannot read", path);
  return entries;
}

void write_peak_cache(const std::string& path, const std::vector<PeakEntry>& entries) {
  create_parent(path);
  std::string text;
  for (const PeakEntry& e : entries) text += entry_line(e);
  TempFile tmp(path);
  tmp.write_all(text);
  tmp.rename_over();
}

Peak cached_or_measured_peak(const std::string& path, const PeakKey& key,
                             const std::function<PeakMeasurement()>& measure) {
  Peak p;
  std::optional<PeakEntry> cached;
  if (!path.empty()) {
    try {
      for (const PeakEntry& e : read_peak_cache(path))
        if (e.key == key) cached = e;
    } catch (const Error& e) {
      p.note = std::string("peak cache ignored (it will be replaced): ") + e.what();
    }
  }
  const PeakMeasurement m = measure();
  const double now = std::round(m.gflops * 10.0) / 10.0;
  const std::string contention = m.contention.empty() ? "" : "contended: " + m.contention;
  if (cached && cached->gflops >= now) {  // the machine did that well before: it is its peak
    p.gflops = cached->gflops;
    p.source = "cached " + cached->date + " in " + path + " (measured now: " + fixed(now, 1) +
               (contention.empty() ? "" : ", " + contention) + ")";
    if (cached->busy == 0 && !contention.empty())
      p.suspect = "cached by a version that did not check for contention, and this start's "
                  "measurement was " + contention;
    return p;
  }
  p.gflops = now;
  const std::string above =
      cached ? ", above the " + fixed(cached->gflops, 1) + " cached " + cached->date : "";
  if (!contention.empty()) {
    p.source = "measured now" + above + " (not cached: contended)";  // suspect says how
    p.suspect = "measured under contention (" + m.contention + "); not cached";
    return p;
  }
  if (path.empty()) {
    p.source = "measured now (not cached: none of MPITRAIN_PEAK_CACHE, XDG_CACHE_HOME, HOME set)";
    return p;
  }
  if (!(p.gflops > 0)) {  // the file keeps only positive rates
    p.source = "measured now (not cached: not a positive rate)";
    return p;
  }
  try {
    store(path, {key, p.gflops, utc_minute_now(), m.busy});
    p.source = "measured now" + above + " (cached in " + path + ")";
  } catch (const Error& e) {
    p.source = "measured now" + above + " (not cached: " + e.what() + ")";
  }
  return p;
}

Peak resolve_cpu_peak(double given, const MpiComm& node, const NodeCpus& cpus, int threads,
                      const std::function<PeakMeasurement()>& measure, const std::string& kind) {
  if (given > 0) return {given, given, 0.0, "given by --peak-gflops", "", ""};
  PeakKey key{mpi_host_name(), cpu_model_name(), threads,
              static_cast<int>(cpus.cpus[cpus.me].size()), cpu_sgemm_kernel()};
  if (kind == kBf16Peak) key.gemm = kBf16GemmLibrary;
  key.kind = kind;
  int mine[2] = {key.threads, key.cpus};
  std::vector<int> all(2 * node.size());
  MPI_CHECK(MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, node.get()));
  auto alike = [&](int a, int b) {
    return all[2 * a] == all[2 * b] && all[2 * a + 1] == all[2 * b + 1];
  };
  const std::string path = peak_cache_path(std::getenv("MPITRAIN_PEAK_CACHE"),
                                           std::getenv("XDG_CACHE_HOME"), std::getenv("HOME"));
  Peak out;
  for (int leader = 0; leader < node.size(); ++leader) {
    bool first = true;  // the lowest node rank of its (threads, CPUs) pair speaks for the pair
    for (int r = 0; r < leader; ++r) first = first && !alike(r, leader);
    if (!first) continue;
    Peak p;
    if (node.rank() == leader) p = cached_or_measured_peak(path, key, measure);
    barrier_sleeping(node);
    MPI_CHECK(MPI_Bcast(&p.gflops, 1, MPI_DOUBLE, leader, node.get()));
    bcast_string(node, p.source, leader);
    bcast_string(node, p.note, leader);
    bcast_string(node, p.suspect, leader);
    if (alike(node.rank(), leader)) out = std::move(p);
  }
  // rate / CPUs it kept busy = the rate of one CPU; x this rank's share of the host's CPUs.
  out.rate = out.gflops;
  out.cpus = cpu_share(cpus);
  out.gflops = out.rate / std::max(1, std::min(key.threads, key.cpus)) * out.cpus;
  return out;
}

}  // namespace mpitrain
