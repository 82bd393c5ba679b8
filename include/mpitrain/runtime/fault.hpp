// Fault injection for crash tests, planned by the environment variable MPITRAIN_FAULT:
//
//   MPITRAIN_FAULT=kill:phase=<phase>:rank=<world rank>[:step=<step>]
//
// The text is `kind:key=value:key=value...`. Kinds: kill (the process SIGKILLs itself, as a
// node failure or `kill -9` would). Phases are the points where code calls FaultPlan::at, today
// the checkpoint commit's: write, close, rename (see ckpt/checkpoint.hpp). Without step, the
// first time the rank reaches the phase is fatal. Unset or empty: no fault.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace mpitrain {

enum class FaultKind { None, Kill };

class FaultPlan {
 public:
  static constexpr const char* kEnvVar = "MPITRAIN_FAULT";

  FaultPlan() = default;  // no fault
  // Parses the text above; UsageError naming MPITRAIN_FAULT for an unknown kind, key or phase,
  // a missing key or a malformed value.
  static FaultPlan parse(const std::string& text);
  static FaultPlan from_env();  // parse(getenv(MPITRAIN_FAULT)), no fault when unset

  // Carries out the plan if it is for this phase, rank and step: for kill, prints one line to
  // stderr ("fault injection: rank 1 kills itself at phase write of step 4") and raise(SIGKILL).
  void at(const char* phase, int rank, int64_t step) const;

  FaultKind kind() const { return kind_; }
  const std::string& phase() const { return phase_; }
  int rank() const { return rank_; }
  std::optional<int64_t> step() const { return step_; }

 private:
  FaultKind kind_ = FaultKind::None;
  std::string phase_;
  int rank_ = -1;
  std::optional<int64_t> step_;
};

}  // namespace mpitrain
