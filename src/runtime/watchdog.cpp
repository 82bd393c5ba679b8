#include "mpitrain/runtime/watchdog.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <memory>

namespace mpitrain {

namespace {

constexpr int kQueryTag = 1, kAnswerTag = 2;
constexpr int kBatch = 64;            // members asked at once when looking for the reporter
constexpr size_t kMaxDetails = 64;    // late ranks described one by one in a report
constexpr double kReportGrace = 1.0;  // seconds between printing a report and MPI_Abort

double seconds_since(int64_t ns, int64_t now) { return 1e-9 * static_cast<double>(now - ns); }

template <size_t N>
void copy_text(char (&out)[N], const char* text) {
  std::snprintf(out, N, "%s", text ? text : "");
}

CallStatus call_status(const CallInfo& c, const std::vector<int>& world_ranks, double seconds) {
  CallStatus s{};
  copy_text(s.op, c.op);
  s.bytes = c.bytes;
  s.peer = c.peer >= 0 && c.peer < static_cast<int>(world_ranks.size()) ? world_ranks[c.peer] : -1;
  s.seq = c.seq;
  s.seconds = seconds;
  return s;
}

// "tp all_reduce seq 56 (4096 bytes)", "pp recv from rank 3 seq 12 (8192 bytes)".
std::string describe_call(const char* comm, const CallStatus& c) {
  char buf[160];
  if (c.peer >= 0)
    std::snprintf(buf, sizeof buf, "%s %s %s rank %d seq %llu (%llu bytes)", comm, c.op,
                  std::strcmp(c.op, "send") == 0 ? "to" : "from", c.peer,
                  static_cast<unsigned long long>(c.seq), static_cast<unsigned long long>(c.bytes));
  else
    std::snprintf(buf, sizeof buf, "%s %s seq %llu (%llu bytes)", comm, c.op,
                  static_cast<unsigned long long>(c.seq), static_cast<unsigned long long>(c.bytes));
  return buf;
}

std::string hostname() {
  char buf[64] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

// ---- CallLog ------------------------------------------------------------------------------------

int64_t CallLog::now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

CallLog::CallLog(std::string name, std::vector<int> world_ranks)
    : name_(std::move(name)), world_ranks_(std::move(world_ranks)) {}

void CallLog::AtomicCall::store(const CallInfo& c) {
  op.store(c.op, std::memory_order_relaxed);
  bytes.store(c.bytes, std::memory_order_relaxed);
  peer.store(c.peer, std::memory_order_relaxed);
  seq.store(c.seq, std::memory_order_relaxed);
  start_ns.store(c.start_ns, std::memory_order_relaxed);
}

CallInfo CallLog::AtomicCall::load() const {
  return {op.load(std::memory_order_relaxed), bytes.load(std::memory_order_relaxed),
          peer.load(std::memory_order_relaxed), seq.load(std::memory_order_relaxed),
          start_ns.load(std::memory_order_relaxed)};
}

// Seqlock (one writer): the version is odd while the fields change; a reader retries until it
// read the same even version before and after.
void CallLog::write_begin() {
  version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
}

void CallLog::write_end() {
  version_.store(version_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

CallInfo CallLog::enter(const char* op, uint64_t bytes, int peer) {
  std::atomic<uint64_t>& counter = peer < 0 ? collectives_ : point_to_point_;
  const CallInfo call{op, bytes, peer, counter.load(std::memory_order_relaxed) + 1, now_ns()};
  write_begin();
  counter.store(call.seq, std::memory_order_relaxed);
  last_.store(call);
  write_end();
  return call;
}

void CallLog::block(const CallInfo& call, int64_t since_ns) {
  write_begin();
  blocked_on_.store(call);
  blocked_since_ns_.store(since_ns, std::memory_order_relaxed);
  blocked_.store(true, std::memory_order_relaxed);
  write_end();
}

void CallLog::unblock() {
  write_begin();
  blocked_.store(false, std::memory_order_relaxed);
  write_end();
}

CallLog::Snapshot CallLog::snapshot() const {
  for (;;) {
    const uint64_t before = version_.load(std::memory_order_acquire);
    if (before & 1) {
      std::this_thread::yield();
      continue;
    }
    Snapshot s;
    s.collectives = collectives_.load(std::memory_order_relaxed);
    s.point_to_point = point_to_point_.load(std::memory_order_relaxed);
    s.last = last_.load();
    s.blocked = blocked_.load(std::memory_order_relaxed);
    s.blocked_on = blocked_on_.load();
    s.blocked_since_ns = blocked_since_ns_.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (version_.load(std::memory_order_relaxed) == before) return s;
  }
}

// ---- reports ------------------------------------------------------------------------------------

const CommStatus* RankStatus::find(const std::string& comm) const {
  for (int i = 0; i < std::min(n_comms, kMaxComms); ++i)
    if (comm == comms[i].name) return &comms[i];
  return nullptr;
}

std::string describe_rank(const RankStatus& s) {
  char where[48];
  if (s.in_step)
    std::snprintf(where, sizeof where, "in step %lld", static_cast<long long>(s.step));
  else if (s.step == 0)
    std::snprintf(where, sizeof where, "in set-up");
  else
    std::snprintf(where, sizeof where, "after step %lld", static_cast<long long>(s.step));
  const CommStatus* latest = nullptr;  // the communicator of the most recent call
  for (int i = 0; i < std::min(s.n_comms, RankStatus::kMaxComms); ++i) {
    const CommStatus& c = s.comms[i];
    char buf[64];
    if (c.blocked) {
      std::snprintf(buf, sizeof buf, ", blocked %.1f s in ", c.blocked_on.seconds);
      return where + std::string(buf) + describe_call(c.name, c.blocked_on);
    }
    if (c.last.op[0] && (!latest || c.last.seconds < latest->last.seconds)) latest = &c;
  }
  std::string text = std::string(where) + ", not in a communication call";
  if (latest) {
    char ago[32];
    std::snprintf(ago, sizeof ago, " %.1f s ago", latest->last.seconds);
    text += "; last: " + describe_call(latest->name, latest->last) + ago;
  }
  return text;
}

std::string rank_ranges(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(ranks[i]);
    if (j > i) {
      out += '-';
      out += std::to_string(ranks[j]);
    }
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

std::string hang_report(const RankStatus& self, const std::string& comm, const CallStatus& call,
                        double waited, double timeout, const std::vector<int>& members,
                        const std::vector<std::optional<RankStatus>>& answers) {
  char line[320];
  std::snprintf(line, sizeof line,
                "watchdog: rank %d (host %s): %s has not completed after %.1f s (timeout %g s); "
                "this rank is ",
                self.world_rank, self.host, describe_call(comm.c_str(), call).c_str(), waited,
                timeout);
  std::string text = line + describe_rank(self) + "\n";
  if (call.peer >= 0) {  // a send or receive: the peer's state
    for (size_t i = 0; i < members.size(); ++i)
      text += "watchdog:   peer rank " + std::to_string(members[i]) +
              (answers[i]
                   ? " (host " + std::string(answers[i]->host) + "): " + describe_rank(*answers[i])
                   : ": no answer") +
              "\n";
    return text;
  }
  if (members.empty()) return text;
  std::vector<int> arrived, late, silent;
  std::vector<const RankStatus*> late_status;
  for (size_t i = 0; i < members.size(); ++i) {
    const CommStatus* c = answers[i] ? answers[i]->find(comm) : nullptr;
    if (!answers[i]) {
      silent.push_back(members[i]);
    } else if (c && c->collectives >= call.seq) {
      arrived.push_back(members[i]);
    } else {
      late.push_back(members[i]);
      late_status.push_back(&*answers[i]);
    }
  }
  text += "watchdog:   " + comm + " = world ranks " + rank_ranges(members) + "; arrived at seq " +
          std::to_string(call.seq) + ": " + rank_ranges(arrived) +
          "; not arrived: " + rank_ranges(late) +
          (silent.empty() ? "" : "; no answer: " + rank_ranges(silent)) + "\n";
  for (size_t i = 0; i < late_status.size() && i < kMaxDetails; ++i)
    text += "watchdog:   not arrived: rank " + std::to_string(late_status[i]->world_rank) +
            " (host " + late_status[i]->host + "): " + describe_rank(*late_status[i]) + "\n";
  if (late_status.size() > kMaxDetails)
    text += "watchdog:   ... and " + std::to_string(late_status.size() - kMaxDetails) +
            " more not arrived\n";
  return text;
}

// ---- the watchdog thread ------------------------------------------------------------------------

Watchdog::Watchdog(const MpiComm& world, const WatchdogConfig& config,
                   std::vector<const CallLog*> logs, std::vector<DeviceWork*> device)
    : config_(config),
      logs_(std::move(logs)),
      device_(std::move(device)),
      world_rank_(world.rank()),
      host_(hostname()) {
  for (const DeviceWork* d : device_) logs_.push_back(&d->calls());
  if (logs_.size() > static_cast<size_t>(RankStatus::kMaxComms))
    MPITRAIN_THROW("the watchdog watches at most " + std::to_string(RankStatus::kMaxComms) +
                   " communicators");
  int level = 0;
  MPI_CHECK(MPI_Query_thread(&level));
  if (level == MPI_THREAD_MULTIPLE) {
    MPI_CHECK(MPI_Comm_dup(world.get(), &side_));
    MPI_CHECK(MPI_Comm_set_errhandler(side_, MPI_ERRORS_RETURN));
    MPI_CHECK(MPI_Irecv(&incoming_, sizeof incoming_, MPI_BYTE, MPI_ANY_SOURCE, kQueryTag, side_,
                        &incoming_request_));
  }
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  if (side_ == MPI_COMM_NULL) return;
  // No checks here: a destructor must not throw, and the job is ending anyway.
  MPI_Cancel(&incoming_request_);
  MPI_Wait(&incoming_request_, MPI_STATUS_IGNORE);
  for (Sent& s : sent_) MPI_Wait(&s.request, MPI_STATUS_IGNORE);  // small messages: sent eagerly
  MPI_Comm_free(&side_);
}

void Watchdog::step_started(int64_t step) {
  step_.store(step, std::memory_order_relaxed);
  in_step_.store(true, std::memory_order_relaxed);
}

void Watchdog::step_finished() {
  in_step_.store(false, std::memory_order_relaxed);
  first_step_done_.store(true, std::memory_order_relaxed);
}

double Watchdog::timeout() const {
  return first_step_done_.load(std::memory_order_relaxed) ? config_.timeout_s
                                                          : config_.startup_timeout_s;
}

RankStatus Watchdog::status() const {
  RankStatus s{};
  s.world_rank = world_rank_;
  s.step = step_.load(std::memory_order_relaxed);
  s.in_step = in_step_.load(std::memory_order_relaxed);
  copy_text(s.host, host_.c_str());
  const int64_t now = CallLog::now_ns();
  for (const CallLog* log : logs_) {
    const CallLog::Snapshot snap = log->snapshot();
    CommStatus& c = s.comms[s.n_comms++];
    copy_text(c.name, log->name().c_str());
    c.collectives = snap.collectives;
    c.point_to_point = snap.point_to_point;
    c.last = call_status(snap.last, log->world_ranks(), seconds_since(snap.last.start_ns, now));
    c.blocked = snap.blocked;
    c.blocked_on =
        call_status(snap.blocked_on, log->world_ranks(), seconds_since(snap.blocked_since_ns, now));
  }
  return s;
}

void Watchdog::run() {
  const auto tick = std::chrono::duration<double>(config_.tick_s);
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, tick, [this] { return stop_; })) {
    try {
      serve();
      if (asked_) {
        for (const CallLog* log : logs_)
          if (log->name() == asked_->comm) report(*log, *asked_, true);
        asked_.reset();  // a communicator this rank does not watch: nothing to say
      }
      check();
    } catch (const std::exception& e) {
      // An MPI error on the side channel: go on watching, without asking the other ranks.
      channel_error_ = e.what();
      std::fprintf(stderr, "watchdog: rank %d: %s; reports will not name the late ranks\n",
                   world_rank_, e.what());
    }
  }
}

void Watchdog::serve() {
  if (!channel()) return;
  for (auto it = sent_.begin(); it != sent_.end();) {
    int done = 0;
    MPI_CHECK(MPI_Test(&it->request, &done, MPI_STATUS_IGNORE));
    it = done ? sent_.erase(it) : std::next(it);
  }
  for (;;) {
    int arrived = 0;
    MPI_Status st;
    MPI_CHECK(MPI_Test(&incoming_request_, &arrived, &st));
    if (!arrived) return;
    if (incoming_.kind == kReport && !asked_) asked_ = incoming_;
    Sent& answer = sent_.emplace_back();
    answer.status = status();
    MPI_CHECK(MPI_Isend(&answer.status, sizeof answer.status, MPI_BYTE, st.MPI_SOURCE, kAnswerTag,
                        side_, &answer.request));
    MPI_CHECK(MPI_Irecv(&incoming_, sizeof incoming_, MPI_BYTE, MPI_ANY_SOURCE, kQueryTag, side_,
                        &incoming_request_));
  }
}

void Watchdog::check() {
  const double limit = timeout();
  const int64_t now = CallLog::now_ns();
  check_device(limit, now);  // a failure first: it explains a hang
  if (limit <= 0) return;
  for (const CallLog* log : logs_) {
    const CallLog::Snapshot s = log->snapshot();
    if (!s.blocked) continue;
    const double waited = seconds_since(s.blocked_since_ns, now);
    if (waited <= limit) continue;
    Query q{};
    q.kind = kReport;
    copy_text(q.comm, log->name().c_str());
    q.call = call_status(s.blocked_on, log->world_ranks(), waited);
    q.waited = waited;
    report(*log, q, false);
  }
}

void Watchdog::check_device(double limit, int64_t now) {
  for (DeviceWork* d : device_) {
    const std::string failure = d->async_failure();
    if (!failure.empty())
      abort_job("watchdog: rank " + std::to_string(world_rank_) + " (host " + host_ + "): " +
                failure + "\n");
    if (limit <= 0) continue;
    const std::optional<CallInfo> call = d->oldest_incomplete();
    if (!call) continue;
    const double waited = seconds_since(call->start_ns, now);
    if (waited <= limit) continue;
    Query q{};
    q.kind = kReport;
    copy_text(q.comm, d->calls().name().c_str());
    q.call = call_status(*call, d->calls().world_ranks(), waited);
    q.waited = waited;
    report(d->calls(), q, false);
  }
}

std::vector<std::optional<RankStatus>> Watchdog::ask(const std::vector<int>& ranks,
                                                     const Query& q) {
  std::vector<RankStatus> got(ranks.size());
  std::vector<MPI_Request> receives(ranks.size(), MPI_REQUEST_NULL);
  for (size_t i = 0; i < ranks.size(); ++i) {
    Sent& query = sent_.emplace_back();
    query.query = q;
    MPI_CHECK(MPI_Isend(&query.query, sizeof query.query, MPI_BYTE, ranks[i], kQueryTag, side_,
                        &query.request));
    MPI_CHECK(
        MPI_Irecv(&got[i], sizeof got[i], MPI_BYTE, ranks[i], kAnswerTag, side_, &receives[i]));
  }
  std::vector<std::optional<RankStatus>> answers(ranks.size());
  const int64_t deadline = CallLog::now_ns() + static_cast<int64_t>(1e9 * config_.answer_wait_s);
  size_t pending = ranks.size();
  while (pending > 0 && CallLog::now_ns() < deadline) {
    serve();  // others may be asking this rank at the same time
    for (size_t i = 0; i < ranks.size(); ++i) {
      if (receives[i] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_CHECK(MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE));
      if (done) answers[i] = got[i], --pending;
    }
    if (pending > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (MPI_Request& r : receives)
    if (r != MPI_REQUEST_NULL) {
      MPI_Cancel(&r);
      MPI_Wait(&r, MPI_STATUS_IGNORE);
    }
  return answers;
}

void Watchdog::sleep_serving(double seconds) {
  const int64_t until = CallLog::now_ns() + static_cast<int64_t>(1e9 * seconds);
  while (CallLog::now_ns() < until) {
    serve();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void Watchdog::report(const CallLog& log, const Query& q, bool asked_to) {
  const RankStatus self = status();
  const std::vector<int>& members = log.world_ranks();
  const double limit = timeout();
  if (!channel()) {
    abort_job(hang_report(self, q.comm, q.call, q.waited, limit, {}, {}) +
              "watchdog:   arrivals unknown: " +
              (side_ == MPI_COMM_NULL ? "MPI runs without MPI_THREAD_MULTIPLE, so the watchdog "
                                        "cannot ask the other ranks"
                                      : "the side channel failed: " + channel_error_) +
              "\n");
  }
  if (q.call.peer >= 0)  // a send or receive: the peer is the one to ask
    abort_job(hang_report(self, q.comm, q.call, q.waited, limit, {q.call.peer},
                          ask({q.call.peer}, Query{kStatus, {}, {}, 0})));
  const int me =
      static_cast<int>(std::find(members.begin(), members.end(), world_rank_) - members.begin());
  if (!asked_to) {
    // The lowest member that has arrived reports; look for one below this rank.
    for (int begin = 0; begin < me; begin += kBatch) {
      const std::vector<int> batch(members.begin() + begin,
                                   members.begin() + std::min(me, begin + kBatch));
      const std::vector<std::optional<RankStatus>> answers = ask(batch, Query{kStatus, {}, {}, 0});
      for (size_t i = 0; i < batch.size(); ++i) {
        const CommStatus* c = answers[i] ? answers[i]->find(q.comm) : nullptr;
        if (!c || c->collectives < q.call.seq) continue;
        ask({batch[i]}, q);  // q.kind is kReport: batch[i] reports
        char line[320];
        std::snprintf(line, sizeof line,
                      "watchdog: rank %d (host %s): %s has not completed after %.1f s "
                      "(timeout %g s); rank %d reports which ranks arrived\n",
                      world_rank_, host_.c_str(), describe_call(q.comm, q.call).c_str(), q.waited,
                      limit, batch[i]);
        std::fputs(line, stderr);
        std::fflush(stderr);
        sleep_serving(2 * config_.answer_wait_s + 2);  // that report aborts the job first
        abort_job("");
      }
    }
  }
  std::vector<int> others;
  for (int r : members)
    if (r != world_rank_) others.push_back(r);
  const std::vector<std::optional<RankStatus>> answers = ask(others, Query{kStatus, {}, {}, 0});
  std::vector<std::optional<RankStatus>> all;
  for (size_t i = 0, j = 0; i < members.size(); ++i)
    all.push_back(members[i] == world_rank_ ? std::optional<RankStatus>(self) : answers[j++]);
  abort_job(hang_report(self, q.comm, q.call, q.waited, limit, members, all));
}

void Watchdog::abort_device_work() {
  if (device_.empty()) return;
  // ncclCommAbort releases kernels waiting for absent peers; should it hang itself, the job
  // still ends after 10 s (the thread is left behind: the process is about to end).
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread([devices = device_, done] {
    for (DeviceWork* d : devices) d->abort();
    done->store(true);
  }).detach();
  const int64_t until = CallLog::now_ns() + 10'000'000'000;
  while (!done->load() && CallLog::now_ns() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

void Watchdog::abort_job(const std::string& text) {
  std::string out = text;
  out += "watchdog: rank " + std::to_string(world_rank_) + " ends the job with exit code " +
         std::to_string(kExitHang) +
         " (a communication call failed or did not complete in time)\n";
  std::fputs(out.c_str(), stderr);
  std::fflush(stderr);
  // A moment for the ranks that time out about now (in other calls) to print theirs too.
  if (!text.empty()) sleep_serving(kReportGrace);
  abort_device_work();
  MPI_Abort(MPI_COMM_WORLD, kExitHang);
  std::_Exit(kExitHang);  // MPI_Abort does not return; should it, end this process anyway
}

}  // namespace mpitrain
