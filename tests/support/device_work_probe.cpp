// device-work-probe: the watchdog's device path (runtime/watchdog.hpp, DeviceWork) without a GPU.
//
// NCCL does not run here, so a stand-in plays an NCCL communicator: its "device operation" is an
// MPI_Iallreduce on a communicator of its own, entered in a CallLog named "dp/nccl" and complete
// when MPI_Test says so (asked from the watchdog thread, as cudaEventQuery would be). The main
// thread, as a trainer's host would after queueing NCCL work, does not wait in any
// communication call: it sleeps ("in step 2, not in a communication call").
//
//   device-work-probe hang    rank 1 never starts the operation: the watchdog of the others
//                             reports the incomplete operation naming rank 1; exit 3
//   device-work-probe fail    rank 1's stand-in reports an asynchronous error after 1 s: its
//                             watchdog prints it, aborts the stand-in (printed), exit 3
//   device-work-probe ok      every rank starts it; it completes; exit 0 after 3 s
// Watchdog timeout 2 s (start-up phase ended at once).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/mpi.hpp"
#include "mpitrain/runtime/program.hpp"
#include "mpitrain/runtime/watchdog.hpp"

using namespace mpitrain;

namespace {

std::vector<int> all_ranks(int size) {
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  return ranks;
}

class StandIn final : public DeviceWork {
 public:
  StandIn(MPI_Comm comm, int size, bool fails)
      : comm_(comm), log_("dp/nccl", all_ranks(size)), fails_(fails) {}

  void start() {  // the "device operation": an all-reduce MPI completes in the background
    call_ = log_.enter("all_reduce", sizeof value_);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, &value_, 1, MPI_INT, MPI_SUM, comm_, &request_));
    started_ = true;
  }
  void finish() {
    if (started_) MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE));
  }

  const CallLog& calls() const override { return log_; }
  std::optional<CallInfo> oldest_incomplete() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_ || done_) return std::nullopt;
    int flag = 0;
    MPI_CHECK(MPI_Test(&request_, &flag, MPI_STATUS_IGNORE));
    done_ = flag != 0;
    return done_ ? std::nullopt : std::optional<CallInfo>(call_);
  }
  std::string async_failure() override {
    if (!fails_ || CallLog::now_ns() - born_ns_ < 1'000'000'000) return "";
    return "NCCL communicator 'dp/nccl': unhandled system error: peer vanished (stand-in)";
  }
  void abort() override { std::fprintf(stderr, "stand-in: aborted by the watchdog\n"); }

 private:
  MPI_Comm comm_;
  CallLog log_;
  bool fails_;
  int64_t born_ns_ = CallLog::now_ns();
  std::mutex mutex_;
  int value_ = 1;
  MPI_Request request_ = MPI_REQUEST_NULL;
  CallInfo call_;
  bool started_ = false, done_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  return mpi_program("device-work-probe", argc, argv, [](int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    if (mode != "hang" && mode != "fail" && mode != "ok")
      throw UsageError("usage: device-work-probe hang|fail|ok");
    const MpiComm& world = MpiComm::world();
    MPI_Comm device = MPI_COMM_NULL;  // the stand-in's own traffic
    MPI_CHECK(MPI_Comm_dup(world.get(), &device));
    {
      StandIn work(device, world.size(), mode == "fail" && world.rank() == 1);
      Watchdog watchdog(world, {2.0, 2.0}, {}, {&work});
      watchdog.step_started(1);
      watchdog.step_finished();
      watchdog.step_started(2);
      if (mode != "hang" || world.rank() != 1) work.start();
      std::this_thread::sleep_for(std::chrono::seconds(mode == "ok" ? 3 : 30));
      work.finish();
    }
    MPI_CHECK(MPI_Comm_free(&device));
    if (world.rank() == 0) std::printf("device-work-probe %s: no report\n", mode.c_str());
    return 0;
  });
}
