#include "mpitrain/runtime/fault.hpp"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string_view>
#include <thread>
#include <vector>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// FaultPlan::at's callers: the checkpoint's staging copy (train/checkpointer.cpp) and commit
// (ckpt/store.cpp, ckpt/write.cpp), the step loop, prepare-data's renames
// (tools/prepare_data.cpp).
constexpr std::string_view kPhases[] = {"staged", "reserved", "write", "close",      "rename",
                                        "latest", "prune",    "step",  "pair-rename"};

// Each kind: its name, the keys it requires, the keys it takes.
struct KindSpec {
  FaultKind kind;
  std::string_view name;
  std::vector<std::string_view> required, allowed;
};
const KindSpec kKinds[] = {
    {FaultKind::Kill, "kill", {"phase", "rank"}, {"phase", "rank", "step"}},
    {FaultKind::Hang, "hang", {"rank"}, {"rank", "step"}},
    {FaultKind::Delay, "delay", {"phase", "rank", "seconds"}, {"phase", "rank", "step", "seconds"}},
    {FaultKind::Nan, "nan", {"layer"}, {"layer", "step"}},
    {FaultKind::Drift, "drift", {"rank"}, {"rank", "step"}},
    {FaultKind::Version, "version", {"rank"}, {"rank"}},
};

// "write|close|...": the phases as the error text lists them.
std::string phase_list() {
  std::string out;
  for (std::string_view p : kPhases) {
    if (!out.empty()) out += '|';
    out += p;
  }
  return out;
}

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw UsageError(std::string(FaultPlan::kEnvVar) + "='" + text + "': " + why +
                   " (expected kill:phase=" + phase_list() +
                   ":rank=R[:step=S], hang:rank=R[:step=S], "
                   "delay:phase=P:rank=R[:step=S]:seconds=X, nan:layer=L[:step=S], "
                   "drift:rank=R[:step=S] or version:rank=R)");
}

// `with` and the step for a plan with a step (" of step 4"), else `any` (" of every step").
std::string step_words(const std::optional<int64_t>& step, const std::string& with,
                       const std::string& any) {
  return step ? with + std::to_string(*step) : any;
}

// A whole decimal number in [lo, hi].
int64_t parse_int(const std::string& text, const std::string& key, const std::string& value,
                  int64_t lo, int64_t hi) {
  size_t used = 0;
  long long n = 0;
  try {
    n = std::stoll(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (value.empty() || used != value.size() || n < lo || n > hi)
    bad(text, key + "='" + value + "' is not a number in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
  return n;
}

}  // namespace

FaultPlan FaultPlan::parse(const std::string& text) {
  FaultPlan plan;
  if (text.empty()) return plan;
  // Split at ':' into the kind and key=value fields.
  std::vector<std::string> fields;
  for (size_t begin = 0;;) {
    const size_t end = text.find(':', begin);
    fields.push_back(text.substr(begin, end - begin));
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  std::map<std::string, std::string> keys;
  for (size_t i = 1; i < fields.size(); ++i) {
    const size_t eq = fields[i].find('=');
    if (eq == std::string::npos || eq == 0) bad(text, "'" + fields[i] + "' is not key=value");
    const std::string key = fields[i].substr(0, eq);
    if (!keys.emplace(key, fields[i].substr(eq + 1)).second)
      bad(text, "'" + key + "' is given twice");
  }
  const KindSpec* spec = nullptr;
  for (const KindSpec& k : kKinds)
    if (k.name == fields[0]) spec = &k;
  if (!spec) bad(text, "unknown fault kind '" + fields[0] + "'");
  plan.kind_ = spec->kind;
  plan.text_ = text;
  for (const auto& [key, value] : keys) {
    bool allowed = false;
    for (std::string_view k : spec->allowed) allowed = allowed || k == key;
    if (!allowed &&
        (key == "phase" || key == "rank" || key == "step" || key == "layer" || key == "seconds"))
      bad(text, "a " + fields[0] + " fault takes no " + key + "=");
    if (key == "phase") {
      bool known = false;
      for (std::string_view p : kPhases) known = known || p == value;
      if (!known) bad(text, "unknown phase '" + value + "'");
      plan.phase_ = value;
    } else if (key == "rank") {
      plan.rank_ =
          static_cast<int>(parse_int(text, key, value, 0, std::numeric_limits<int>::max()));
    } else if (key == "layer") {
      plan.layer_ =
          static_cast<int>(parse_int(text, key, value, 0, std::numeric_limits<int>::max()));
    } else if (key == "step") {
      plan.step_ = parse_int(text, key, value, 0, std::numeric_limits<int64_t>::max());
    } else if (key == "seconds") {
      plan.seconds_ = static_cast<int>(parse_int(text, key, value, 1, 3600));
    } else {
      bad(text, "unknown key '" + key + "'");
    }
  }
  for (std::string_view k : spec->required)
    if (!keys.count(std::string(k))) bad(text, "no " + std::string(k) + "=");
  if (plan.kind_ == FaultKind::Hang) plan.phase_ = "step";
  return plan;
}

FaultPlan FaultPlan::from_env() {
  const char* env = std::getenv(kEnvVar);
  const std::string text = env ? env : "";
  // Refused rather than ignored: a crash test on this build would otherwise pass vacuously.
  if (!kCompiledIn && !text.empty())
    throw UsageError(std::string(kEnvVar) + "='" + text +
                     "': this build has no fault injection (MPITRAIN_FAULT_INJECTION=OFF)");
  return parse(text);
}

std::string FaultPlan::describe() const {
  const std::string who = "rank " + std::to_string(rank_);
  switch (kind_) {
    case FaultKind::None:
      return "no fault";
    case FaultKind::Kill:
      return who + " will SIGKILL itself at phase " + phase_ +
             step_words(step_, " of step ", " of the first step that gets there");
    case FaultKind::Hang:
      return who + " will hang (sleep for a day) at the start" +
             step_words(step_, " of step ", " of its first step");
    case FaultKind::Delay:
      return who + " will pause " + std::to_string(seconds_) + " s at phase " + phase_ +
             step_words(step_, " of step ", " of every step that gets there");
    case FaultKind::Nan:
      return "the ranks holding block " + std::to_string(layer_) +
             " will put a NaN into its gradient" + step_words(step_, " in step ", " in every step");
    case FaultKind::Drift:
      return who + " will change one of its parameters by one ulp after the update" +
             step_words(step_, " of step ", " of every step");
    case FaultKind::Version:
      return who + " will report another build id at start-up";
  }
  return "";  // not reached: every kind is named above
}

std::string FaultPlan::warning() const {
  return "WARNING: fault injection armed by " + std::string(kEnvVar) + "='" + text_ +
         "': " + describe() + " — unset " + kEnvVar + " for a production run";
}

#if MPITRAIN_FAULT_INJECTION
void FaultPlan::at(const char* phase, int rank, int64_t step) const {
  if ((kind_ != FaultKind::Kill && kind_ != FaultKind::Hang && kind_ != FaultKind::Delay) ||
      phase_ != phase || !fires(kind_, rank, step))
    return;
  if (kind_ == FaultKind::Delay) {
    std::fprintf(stderr, "fault injection: rank %d pauses %d s at phase %s of step %lld\n", rank,
                 seconds_, phase, static_cast<long long>(step));
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::seconds(seconds_));
    return;
  }
  if (kind_ == FaultKind::Hang) {
    std::fprintf(stderr, "fault injection: rank %d hangs in step %lld\n", rank,
                 static_cast<long long>(step));
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::hours(24));
    return;
  }
  std::fprintf(stderr, "fault injection: rank %d kills itself at phase %s of step %lld\n", rank,
               phase, static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

bool FaultPlan::fires(FaultKind kind, int rank, int64_t step) const {
  return kind != FaultKind::None && kind_ == kind && (rank_ < 0 || rank_ == rank) &&
         (!step_ || *step_ == step);
}
#endif

}  // namespace mpitrain
