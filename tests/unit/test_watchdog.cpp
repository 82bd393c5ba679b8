// The collective watchdog on one rank: call logs, the report's text, and the thread that ends a
// job blocked too long (death tests: the real MPI_Abort, exit code kExitHang).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/watchdog.hpp"
#include "unit_mpi.hpp"

using namespace mpitrain;

namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

CallStatus call(const char* op, uint64_t bytes, uint64_t seq, double seconds, int peer = -1) {
  CallStatus c{};
  std::snprintf(c.op, sizeof c.op, "%s", op);
  c.bytes = bytes;
  c.peer = peer;
  c.seq = seq;
  c.seconds = seconds;
  return c;
}

// A rank with one communicator: `collectives` entered, the last one `last`; blocked in `blocked`
// if its op is not empty.
RankStatus rank_status(int rank, int64_t step, const char* comm, uint64_t collectives,
                       const CallStatus& last, const CallStatus& blocked = {}) {
  RankStatus s{};
  s.world_rank = rank;
  s.step = step;
  s.in_step = 1;
  std::snprintf(s.host, sizeof s.host, "node%d", rank / 2);
  s.n_comms = 1;
  CommStatus& c = s.comms[0];
  std::snprintf(c.name, sizeof c.name, "%s", comm);
  c.collectives = collectives;
  c.last = last;
  c.blocked = blocked.op[0] != 0;
  c.blocked_on = blocked;
  return s;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST(CallLog, NumbersCollectivesAndPointToPointApart) {
  CallLog log("tp", {4, 5});
  EXPECT_EQ(log.name(), "tp");
  EXPECT_EQ(log.world_ranks(), (std::vector<int>{4, 5}));
  const CallLog::Snapshot empty = log.snapshot();
  EXPECT_EQ(empty.collectives, 0u);
  EXPECT_EQ(empty.last.op, nullptr);
  EXPECT_FALSE(empty.blocked);

  const CallInfo a = log.enter("all_reduce", 64);
  const CallInfo s = log.enter("send", 32, 1);
  const CallInfo b = log.enter("barrier", 0);
  EXPECT_EQ(a.seq, 1u);
  EXPECT_EQ(s.seq, 1u);  // the first send or receive
  EXPECT_EQ(b.seq, 2u);  // the second collective
  const CallLog::Snapshot snap = log.snapshot();
  EXPECT_EQ(snap.collectives, 2u);
  EXPECT_EQ(snap.point_to_point, 1u);
  EXPECT_STREQ(snap.last.op, "barrier");
  EXPECT_GE(snap.last.start_ns, a.start_ns);
}

TEST(CallLog, BlockedOnTheCallWaitedFor) {
  CallLog log("dp", {0, 1});
  const CallInfo first = log.enter("all_reduce", 400);
  log.enter("all_reduce", 800);  // started later, waited for later
  log.block(first, CallLog::now_ns());
  CallLog::Snapshot s = log.snapshot();
  EXPECT_TRUE(s.blocked);
  EXPECT_EQ(s.blocked_on.seq, 1u);
  EXPECT_EQ(s.blocked_on.bytes, 400u);
  EXPECT_EQ(s.last.seq, 2u);
  EXPECT_GE(s.blocked_since_ns, first.start_ns);
  log.unblock();
  EXPECT_FALSE(log.snapshot().blocked);
}

TEST(CallLog, SnapshotsAreConsistentWhileTheOwnerWrites) {
  // A reader on another thread never sees a blocked call together with another call's time.
  CallLog log("world", {0});
  std::atomic<bool> done{false};
  std::thread writer([&] {
    for (int i = 0; i < 200000; ++i) {
      const CallInfo c = log.enter("all_reduce", static_cast<uint64_t>(i));
      log.block(c, CallLog::now_ns());
      log.unblock();
    }
    done = true;
  });
  int checked = 0;
  while (!done) {
    const CallLog::Snapshot s = log.snapshot();
    if (!s.blocked) continue;
    ++checked;
    ASSERT_EQ(s.blocked_on.seq, s.last.seq);  // blocked in the last call entered
    ASSERT_EQ(s.blocked_on.bytes + 1, s.blocked_on.seq);
    ASSERT_GE(s.blocked_since_ns, s.blocked_on.start_ns);
  }
  writer.join();
  SUCCEED() << checked << " blocked snapshots checked";
}

TEST(WatchdogReport, RankRanges) {
  EXPECT_EQ(rank_ranges({}), "none");
  EXPECT_EQ(rank_ranges({3}), "3");
  EXPECT_EQ(rank_ranges({0, 1, 2, 3, 5, 7, 8}), "0-3,5,7-8");
}

TEST(WatchdogReport, DescribesWhereARankIs) {
  const RankStatus computing = rank_status(1, 5, "tp", 56, call("all_reduce", 4096, 56, 3.25));
  EXPECT_EQ(describe_rank(computing),
            "in step 5, not in a communication call; last: tp all_reduce seq 56 (4096 bytes) 3.2 s "
            "ago");
  const RankStatus blocked = rank_status(2, 5, "dp", 7, call("all_reduce", 40960, 7, 9.0),
                                         call("all_reduce", 40960, 7, 3.1));
  EXPECT_EQ(describe_rank(blocked),
            "in step 5, blocked 3.1 s in dp all_reduce seq 7 (40960 bytes)");
  RankStatus setup = rank_status(0, 0, "world", 0, {});
  setup.in_step = 0;
  EXPECT_EQ(describe_rank(setup), "in set-up, not in a communication call");
  RankStatus between = computing;
  between.in_step = 0;
  EXPECT_TRUE(contains(describe_rank(between), "after step 5")) << describe_rank(between);
}

TEST(WatchdogReport, NamesArrivedLateAndSilentRanks) {
  const CallStatus stuck = call("all_reduce", 4096, 57, 0);
  const RankStatus self = rank_status(0, 2, "tp", 57, stuck, call("all_reduce", 4096, 57, 3.2));
  const RankStatus arrived = rank_status(1, 2, "tp", 57, stuck, call("all_reduce", 4096, 57, 3.0));
  const RankStatus late = rank_status(2, 2, "tp", 56, call("all_reduce", 4096, 56, 3.3));
  const std::string text = hang_report(self, "tp", call("all_reduce", 4096, 57, 3.2), 3.2, 3.0,
                                       {0, 1, 2, 3}, {self, arrived, late, std::nullopt});
  EXPECT_TRUE(contains(text,
                       "watchdog: rank 0 (host node0): tp all_reduce seq 57 (4096 bytes) "
                       "has not completed after 3.2 s (timeout 3 s)"))
      << text;
  EXPECT_TRUE(contains(text,
                       "tp = world ranks 0-3; arrived at seq 57: 0-1; not arrived: 2; no "
                       "answer: 3"))
      << text;
  EXPECT_TRUE(contains(text,
                       "not arrived: rank 2 (host node1): in step 2, not in a communication "
                       "call; last: tp all_reduce seq 56"))
      << text;
}

TEST(WatchdogReport, ASendOrReceiveDescribesThePeer) {
  const CallStatus recv = call("recv", 8192, 12, 3.4, 3);
  const RankStatus self = rank_status(1, 4, "pp", 0, recv, recv);
  const RankStatus peer =
      rank_status(3, 4, "tp", 40, call("all_reduce", 64, 40, 1.0), call("all_reduce", 64, 40, 3.1));
  const std::string text = hang_report(self, "pp", recv, 3.4, 3.0, {3}, {peer});
  EXPECT_TRUE(contains(text, "pp recv from rank 3 seq 12 (8192 bytes) has not completed")) << text;
  EXPECT_TRUE(contains(text,
                       "peer rank 3 (host node1): in step 4, blocked 3.1 s in tp all_reduce "
                       "seq 40"))
      << text;
  EXPECT_TRUE(contains(hang_report(self, "pp", recv, 3.4, 3.0, {3}, {std::nullopt}),
                       "peer rank 3: no answer"));
}

TEST(Watchdog, QuietWhileCallsCompleteOrTheRankComputes) {
  mpitrain::test::start_mpi();
  // Timeout 0.3 s: a started call 1 s old that nobody waits for, and waits shorter than the
  // timeout, are no hang.
  CallLog log("world", {0});
  {
    Watchdog watchdog(MpiComm::world(), {0.3, 0.3, 1.0, 0.05}, {&log});
    const CallInfo started = log.enter("all_reduce", 64);
    sleep_s(1.0);
    for (int i = 0; i < 5; ++i) {
      log.block(started, CallLog::now_ns());
      sleep_s(0.1);
      log.unblock();
    }
  }
  SUCCEED();  // still running: nothing aborted the process
}

TEST(Watchdog, ABlockedCallEndsTheJobWithTheHangExitCode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        mpitrain::test::start_mpi();  // in the child: the test itself starts no MPI
        CallLog log("tp", {0});
        Watchdog watchdog(MpiComm::world(), {0.5, 0.5, 1.0, 0.05}, {&log});
        watchdog.step_started(3);
        log.block(log.enter("all_reduce", 4096), CallLog::now_ns());
        sleep_s(30);
      },
      ::testing::ExitedWithCode(kExitHang),
      "watchdog: rank 0 .*tp all_reduce seq 1 \\(4096 bytes\\) has not completed after 0.[5-9] s "
      "\\(timeout 0.5 s\\); this rank is in step 3");
}

TEST(Watchdog, StartupTimeoutUntilTheFirstStepFinishes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // No limit at start-up (0), 0.3 s after the first step: blocked 1 s before it is fine, after
  // it the job ends.
  EXPECT_EXIT(
      {
        mpitrain::test::start_mpi();  // in the child: the test itself starts no MPI
        CallLog log("dp", {0});
        Watchdog watchdog(MpiComm::world(), {0, 0.3, 1.0, 0.05}, {&log});
        log.block(log.enter("barrier", 0), CallLog::now_ns());
        sleep_s(1.0);
        log.unblock();
        std::fprintf(stderr, "survived start-up\n");
        watchdog.step_started(1);
        watchdog.step_finished();
        log.block(log.enter("barrier", 0), CallLog::now_ns());
        sleep_s(30);
      },
      ::testing::ExitedWithCode(kExitHang), "survived start-up(.|\n)*dp barrier seq 2");
}
