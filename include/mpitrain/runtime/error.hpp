// Errors and the checks that raise them.
//
// Exit codes: 0 done, 85 stopped early after a checkpoint (requeue), and three kinds of failure:
//   UsageError — the user's input is wrong (option, file, layout). Exit code 2, before any work.
//   Error      — something failed while working (a library call, an I/O error, a non-finite
//                gradient under --on-nan stop, replicas that drifted apart). Exit code 1.
//   a hang     — a communication call blocked longer than --comm-timeout (runtime/watchdog.hpp):
//                MPI_Abort with exit code 3.
// Every library call goes through a check macro that throws with file:line and the library's
// own error text; exceptions stop at main(), which prints one line and exits.
#pragma once

#include <stdexcept>
#include <string>

namespace mpitrain {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitHang = 3;      // the watchdog ended a job stuck (or failed) in communication
inline constexpr int kExitRequeue = 85;  // stopped by a signal or time limit after saving: requeue me

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

// "file.cpp:42: what" — the prefix every check adds.
std::string where(const char* file, int line, const std::string& what);

// Throws UsageError(message) when cond is false: for validating user input.
inline void require(bool cond, const std::string& message) {
  if (!cond) throw UsageError(message);
}

}  // namespace mpitrain

#define MPITRAIN_THROW(msg) throw ::mpitrain::Error(::mpitrain::where(__FILE__, __LINE__, (msg)))
