// Fault injection for crash tests, planned by the environment variable MPITRAIN_FAULT:
//
//   MPITRAIN_FAULT=kill:phase=<phase>:rank=<world rank>[:step=<step>]
//   MPITRAIN_FAULT=hang:rank=<r>[:step=<s>]      rank r sleeps (a day) at the start of step s
//   MPITRAIN_FAULT=delay:phase=<phase>:rank=<r>[:step=<s>]:seconds=<x>
//                                                rank r pauses x seconds (1 to 3600) there: a
//                                                slow file system (e.g. a save still in flight
//                                                when a signal comes)
//   MPITRAIN_FAULT=nan:layer=<l>[:step=<s>]      a NaN in block l's gradient in step s, on the
//                                                ranks that hold block l
//   MPITRAIN_FAULT=drift:rank=<r>[:step=<s>]     rank r changes one of its parameters by one ulp
//                                                after step s's update
//   MPITRAIN_FAULT=version:rank=<r>              rank r reports another build id at start-up
//
// The text is `kind:key=value:key=value...`. kill: the process SIGKILLs itself, as a node failure
// or `kill -9` would. Phases are the points where code calls FaultPlan::at: staged (the save's
// copy of the state is taken, nothing written yet: train/checkpointer.hpp), the checkpoint
// commit's reserved (file created, its space reserved), write, close, rename, latest and prune (see ckpt/checkpoint.hpp; in the writer's
// thread when the save is asynchronous), step (the start
// of a training step, where a hang happens too), and pair-rename (prepare-data, rank 0, step 0:
// between renaming train and val into place). Steps count from 1, as the log does; without
// step, any step (so kill and hang at the first, nan and drift at every one). Unset or empty: no
// fault. The other kinds are carried out by the code they test (train/numeric_guard.hpp,
// train/replica_check.hpp, train/software_check.hpp), which asks fires().
//
// Every build reads MPITRAIN_FAULT (users test their clusters with it), and the trainer's rank 0
// prints warning() when a fault is armed, so a plan exported into a production job is seen.
// CMake option MPITRAIN_FAULT_INJECTION=OFF compiles it out: at() and fires() do nothing, and
// from_env() refuses a set MPITRAIN_FAULT (UsageError, exit 2) so a test run cannot silently
// inject nothing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#ifndef MPITRAIN_FAULT_INJECTION
// CMake defines it (to 0) only for MPITRAIN_FAULT_INJECTION=OFF.
#define MPITRAIN_FAULT_INJECTION 1
#endif

namespace mpitrain {

enum class FaultKind { None, Kill, Hang, Delay, Nan, Drift, Version };

class FaultPlan {
 public:
  static constexpr const char* kEnvVar = "MPITRAIN_FAULT";
  static constexpr bool kCompiledIn = MPITRAIN_FAULT_INJECTION;  // the CMake option

  FaultPlan() = default;  // no fault
  // Parses the text above; UsageError naming MPITRAIN_FAULT for an unknown kind, key or phase,
  // a key the kind does not take, a missing key or a malformed value.
  static FaultPlan parse(const std::string& text);
  // parse(getenv(MPITRAIN_FAULT)), no fault when unset or empty. Compiled out: UsageError
  // "MPITRAIN_FAULT='<text>': this build has no fault injection (MPITRAIN_FAULT_INJECTION=OFF)"
  // when set.
  static FaultPlan from_env();

  bool armed() const { return kind_ != FaultKind::None; }
  // The plan in words: "rank 1 will SIGKILL itself at phase write of step 4"; "no fault".
  std::string describe() const;
  // The line rank 0 prints when armed: "WARNING: fault injection armed by MPITRAIN_FAULT='<text>':
  // <describe()> — unset MPITRAIN_FAULT for a production run".
  std::string warning() const;

  // at: carries out a kill, hang or delay planned for this phase, rank and step: kill prints one
  // line to stderr ("fault injection: rank 1 kills itself at phase write of step 4") and
  // raise(SIGKILL); hang (phase step) prints "fault injection: rank 1 hangs in step 2" and
  // sleeps for a day; delay prints "fault injection: rank 1 pauses 3 s at phase write of step
  // 4" and sleeps that long. Any thread may call it. fires: the plan is of this kind, for this
  // rank (or any, if it names none) and step (or any). Compiled out, both are empty inline functions.
#if MPITRAIN_FAULT_INJECTION
  void at(const char* phase, int rank, int64_t step) const;
  bool fires(FaultKind kind, int rank, int64_t step) const;
#else
  void at(const char*, int, int64_t) const {}
  bool fires(FaultKind, int, int64_t) const { return false; }
#endif

  FaultKind kind() const { return kind_; }
  const std::string& phase() const { return phase_; }
  int rank() const { return rank_; }    // -1: not named (nan)
  int layer() const { return layer_; }  // nan's block; -1 otherwise
  int seconds() const { return seconds_; }  // delay's pause; 0 otherwise
  std::optional<int64_t> step() const { return step_; }

 private:
  FaultKind kind_ = FaultKind::None;
  std::string text_;  // as given, for the warning
  std::string phase_;
  int rank_ = -1;
  int layer_ = -1;
  int seconds_ = 0;
  std::optional<int64_t> step_;
};

}  // namespace mpitrain
