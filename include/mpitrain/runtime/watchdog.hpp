// The collective watchdog: a communication call that blocks too long ends the job, loudly.
//
// Every Communicator call is recorded in its communicator's CallLog (comm/communicator.hpp): the
// number of calls entered, the last one (op, bytes, start), and the call this rank is blocked in,
// if any, and since when — a blocking call, or a wait() on a started non-blocking one. The main
// thread writes a CallLog without locks or allocation (a seqlock over a few atomics); the
// watchdog thread reads it.
//
// The Watchdog thread wakes four times a second. When this rank has been blocked in one call
// longer than the timeout (startup_timeout_s until the first step has finished, then
// timeout_s), it prints one block: its world rank and host, the communicator, the call's
// sequence number, op, bytes and how long it has waited; which ranks of the communicator have
// arrived at that call and which not, each late rank with where it is ("in step 5, not in a
// communication call; last: tp all_reduce seq 56"). A second later (so that ranks timing out in
// other calls at about the same time print theirs too) MPI_Abort(world, kExitHang). Time spent
// computing between starting a non-blocking call and waiting for it does not count: the clock
// runs while the rank is blocked.
//
// The side channel. Arrivals are learned from the other ranks' watchdog threads, never their
// main threads (blocked in MPI, or busy computing): each watchdog thread keeps a receive posted
// on its own duplicate of MPI_COMM_WORLD and answers a query with its rank's status (step, and
// per communicator the calls entered, the last call and the call it is blocked in). Its polling
// (MPI_Test) also drives this process's MPI progress, so a rank that sleeps in computation still
// answers. This needs MPI_THREAD_MULTIPLE, which MpiRuntime asks for; where MPI gives less, the
// watchdog still detects and aborts, and says that arrivals are unknown.
// Not files in the out dir: every rank would write (and others read) a file on the shared file
// system several times a minute, a metadata load a parallel file system at thousands of ranks
// does not want, and NFS client caches can show old contents. Not one-sided MPI (a window of
// statuses): a passive-target MPI_Get over TCP and several fabrics needs the target's MPI
// progress, which a rank busy computing does not make.
//
// Who reports. Thousands of ranks stuck in one world collective, each querying all others, would
// flood the network. So a rank that times out in a collective first asks the members below it
// (by rank in the communicator, 64 at a time, stopping at the first batch that has one) for the
// lowest member that has arrived. If there is one, it asks that member to report, prints its own
// line only, and aborts after a grace period (should that report never come); the lowest arrived
// member asks every member and prints the whole picture. For a send or receive, only the peer is
// asked.
//
// Device work (DeviceWork below: the NCCL communicators). An NCCL operation runs on a stream
// the host does not block in: the host goes on queueing work and blocks later somewhere else
// (a copy to the host) that no call log shows. So each tick the watchdog also asks every
// DeviceWork for its oldest operation not yet complete on the device; one older than the
// timeout is reported exactly as a blocked call (the arrivals come from the same call logs), and
// an asynchronous error (a peer or link gone) ends the job at once with its text. Before
// MPI_Abort the watchdog aborts every DeviceWork (ncclCommAbort), so that kernels waiting for a
// peer that will never come are released.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "mpitrain/runtime/mpi.hpp"

namespace mpitrain {

// One recorded call. op: a string literal ("all_reduce"); peer: the partner's rank in the
// communicator for a send or receive, -1 for a collective; seq: for a collective its number on
// the communicator (1, 2, ...: the same call has the same number on every member), for a send
// or receive this rank's count of them on the communicator.
struct CallInfo {
  const char* op = nullptr;
  uint64_t bytes = 0;
  int peer = -1;
  uint64_t seq = 0;
  int64_t start_ns = 0;  // steady clock
};

// The calls of one communicator. Written by one thread (the one that makes the calls), read by
// any: snapshot() returns a consistent copy.
class CallLog {
 public:
  // name: "world", "tp", ... ("" for a communicator nobody watches); world_ranks: the members'
  // ranks in MPI_COMM_WORLD, in communicator rank order.
  CallLog(std::string name, std::vector<int> world_ranks);
  CallLog(const CallLog&) = delete;
  CallLog& operator=(const CallLog&) = delete;

  static int64_t now_ns();  // the steady clock, as CallInfo::start_ns counts it
  CallInfo enter(const char* op, uint64_t bytes, int peer = -1);  // a call starts (now)
  void block(const CallInfo& call, int64_t since_ns);  // this rank waits for call to complete
  void unblock();                                      // ... and no longer

  struct Snapshot {
    uint64_t collectives = 0, point_to_point = 0;  // calls entered
    CallInfo last;                                 // the last call entered (op null: none)
    bool blocked = false;
    CallInfo blocked_on;
    int64_t blocked_since_ns = 0;
  };
  Snapshot snapshot() const;

  const std::string& name() const { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

 private:
  struct AtomicCall {
    std::atomic<const char*> op{nullptr};
    std::atomic<uint64_t> bytes{0};
    std::atomic<int> peer{-1};
    std::atomic<uint64_t> seq{0};
    std::atomic<int64_t> start_ns{0};
    void store(const CallInfo& c);
    CallInfo load() const;
  };
  void write_begin();  // seqlock: odd while writing
  void write_end();

  std::string name_;
  std::vector<int> world_ranks_;
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> collectives_{0}, point_to_point_{0};
  AtomicCall last_, blocked_on_;
  std::atomic<bool> blocked_{false};
  std::atomic<int64_t> blocked_since_ns_{0};
};

// What one rank's watchdog tells the others: fixed size, sent as bytes (every rank runs the same
// build, which the start-up software check makes sure of).
struct CallStatus {
  char op[24];  // "" = none
  uint64_t bytes;
  int32_t peer;  // world rank of the partner, -1 for a collective
  uint64_t seq;
  double seconds;  // since the call started (last call) or since blocking began (blocked call)
};
struct CommStatus {
  char name[16];
  uint64_t collectives, point_to_point;
  CallStatus last;
  int32_t blocked;
  CallStatus blocked_on;
};
struct RankStatus {
  static constexpr int kMaxComms = 10;  // world, tp, dp, pp, embedding; each on MPI and NCCL
  int32_t world_rank;
  int64_t step;     // the step it is in or last finished (1-based); 0 = set-up
  int32_t in_step;  // 1 between step_started and step_finished
  char host[64];
  int32_t n_comms;
  CommStatus comms[kMaxComms];

  const CommStatus* find(const std::string& comm) const;  // nullptr if it has no such one
};

// "in step 5, not in a communication call; last: tp all_reduce seq 56 (4096 bytes) 3.2 s ago",
// or "in step 5, blocked 3.1 s in dp all_reduce seq 7 (40960 bytes)".
std::string describe_rank(const RankStatus& s);
// "0-3,5,7-8" for sorted ranks.
std::string rank_ranges(const std::vector<int>& ranks);

// The report on a call that did not complete, as the rank that reports prints it. self: this
// rank; comm, call: the communicator and the call; waited: seconds a rank has been blocked in it;
// members: the ranks asked (for a collective the communicator's world ranks, self included; for
// a send or receive the peer; none without a side channel); answers[i]: member i's status,
// nullopt if it did not answer.
std::string hang_report(const RankStatus& self, const std::string& comm, const CallStatus& call,
                        double waited, double timeout, const std::vector<int>& members,
                        const std::vector<std::optional<RankStatus>>& answers);

// Operations that complete on a device, not in a host call (see the top). Every function is
// called from the watchdog thread, concurrently with the thread that issues the operations.
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  virtual const CallLog& calls() const = 0;  // where the operations are entered
  // The oldest operation entered and not yet complete on the device; nullopt when none.
  virtual std::optional<CallInfo> oldest_incomplete() = 0;
  // "" while healthy; else what failed (NCCL's asynchronous error and its last message).
  virtual std::string async_failure() = 0;
  // Ends the work for good (ncclCommAbort), before the watchdog ends the job; the issuing
  // thread's later calls wait for that end instead of failing on their own.
  virtual void abort() = 0;
};

struct WatchdogConfig {
  double startup_timeout_s = 300;  // until the first step_finished(); 0 = no limit
  double timeout_s = 100;          // after it; 0 = no limit
  double answer_wait_s = 5;        // how long a report waits for the other ranks' answers
  double tick_s = 0.25;
};

class Watchdog {
 public:
  // Collective over world (duplicates it for the side channel); starts the thread. logs: the
  // communicators to watch; device: the device work to watch, whose call logs are watched too
  // (at most RankStatus::kMaxComms logs in all, distinct names); all must outlive the watchdog.
  Watchdog(const MpiComm& world, const WatchdogConfig& config, std::vector<const CallLog*> logs,
           std::vector<DeviceWork*> device = {});
  ~Watchdog();  // stops and joins the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void step_started(int64_t step);  // 1-based, as the log counts
  void step_finished();             // the first one switches to timeout_s

 private:
  struct Query {
    int32_t kind;  // kStatus: answer only; kReport: answer, then report on (comm, seq)
    char comm[16];
    CallStatus call;
    double waited;
  };
  struct Sent {  // a message in flight and its buffer
    MPI_Request request;
    Query query;
    RankStatus status;
  };
  static constexpr int32_t kStatus = 1, kReport = 2;

  void run();
  bool channel() const { return side_ != MPI_COMM_NULL && channel_error_.empty(); }
  void serve();  // answers the queries that have arrived
  void check();  // reports a call blocked too long
  void check_device(double limit, int64_t now);  // device work: too old, or failed
  RankStatus status() const;
  double timeout() const;
  // Asks ranks, returns their answers (nullopt: none within answer_wait_s).
  std::vector<std::optional<RankStatus>> ask(const std::vector<int>& ranks, const Query& q);
  [[noreturn]] void report(const CallLog& log, const Query& q, bool asked_to);
  [[noreturn]] void abort_job(const std::string& text);
  void abort_device_work();  // DeviceWork::abort on each, for at most 10 s
  void sleep_serving(double seconds);

  WatchdogConfig config_;
  std::vector<const CallLog*> logs_;
  std::vector<DeviceWork*> device_;
  int world_rank_ = 0;
  std::string host_;
  MPI_Comm side_ = MPI_COMM_NULL;  // null without MPI_THREAD_MULTIPLE: no side channel
  std::string channel_error_;      // the side channel's MPI error, once it had one
  Query incoming_{};
  MPI_Request incoming_request_ = MPI_REQUEST_NULL;
  std::list<Sent> sent_;        // answers and queries in flight (MPI reads their buffers)
  std::optional<Query> asked_;  // a request to report, from another rank
  std::atomic<int64_t> step_{0};
  std::atomic<bool> in_step_{false}, first_step_done_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mpitrain
