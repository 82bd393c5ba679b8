// What every Communicator implementation keeps about its calls, shared by MPI's and NCCL's:
//   BlockedTimer  the scope of a blocking call or a wait: its time goes to blocked_seconds and
//                 the call log shows this rank blocked in it (for the watchdog)
//   SlotPool      the slots of started operations, reused so that starting and waiting inside a
//                 step do not allocate once the pool has grown
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/watchdog.hpp"

namespace mpitrain {

class BlockedTimer {
 public:
  // A wait for a started call.
  BlockedTimer(double& total, CallLog& log, const CallInfo& call)
      : BlockedTimer(total, log, call, CallLog::now_ns()) {}
  // A blocking call, entered here.
  BlockedTimer(double& total, CallLog& log, const char* op, uint64_t bytes)
      : BlockedTimer(total, log, log.enter(op, bytes), -1) {}
  ~BlockedTimer() {
    log_.unblock();
    total_ += 1e-9 * static_cast<double>(CallLog::now_ns() - start_ns_);
  }
  BlockedTimer(const BlockedTimer&) = delete;
  BlockedTimer& operator=(const BlockedTimer&) = delete;

 private:
  BlockedTimer(double& total, CallLog& log, const CallInfo& call, int64_t start_ns)
      : total_(total), log_(log), start_ns_(start_ns < 0 ? call.start_ns : start_ns) {
    log_.block(call, start_ns_);
  }

  double& total_;
  CallLog& log_;
  int64_t start_ns_;  // steady clock
};

// Slot: default-constructible, with a `bool busy`. A handle's id is its slot's index.
template <typename Slot>
class SlotPool {
 public:
  int acquire() {  // a free slot, marked busy (a new one when none is free)
    int id;
    if (free_.empty()) {
      id = static_cast<int>(slots_.size());
      slots_.emplace_back();
      free_.reserve(slots_.size());  // so that release() never allocates
    } else {
      id = free_.back();
      free_.pop_back();
    }
    slots_[id].busy = true;
    return id;
  }
  // The slot of a pending handle; Error for any other id (a wait without a start, or twice).
  Slot& pending(int id) {
    if (id < 0 || id >= static_cast<int>(slots_.size()) || !slots_[id].busy)
      MPITRAIN_THROW("wait() on handle " + std::to_string(id) + ", which is not pending");
    return slots_[id];
  }
  void release(int id) {
    slots_[id].busy = false;
    free_.push_back(id);
  }
  Slot& operator[](int id) { return slots_[id]; }
  auto begin() { return slots_.begin(); }  // every slot, busy or not
  auto end() { return slots_.end(); }

 private:
  std::vector<Slot> slots_;
  std::vector<int> free_;
};

}  // namespace mpitrain
