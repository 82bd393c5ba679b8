#include "mpitrain/runtime/fault.hpp"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <string_view>
#include <vector>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr std::string_view kPhases[] = {"write", "close", "rename"};  // FaultPlan::at call sites

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw UsageError(std::string(FaultPlan::kEnvVar) + "='" + text + "': " + why +
                   " (expected kill:phase=write|close|rename:rank=R[:step=S])");
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
  if (fields[0] != "kill") bad(text, "unknown fault kind '" + fields[0] + "'");
  plan.kind_ = FaultKind::Kill;
  for (const auto& [key, value] : keys) {
    if (key == "phase") {
      bool known = false;
      for (std::string_view p : kPhases) known = known || p == value;
      if (!known) bad(text, "unknown phase '" + value + "'");
      plan.phase_ = value;
    } else if (key == "rank") {
      plan.rank_ =
          static_cast<int>(parse_int(text, key, value, 0, std::numeric_limits<int>::max()));
    } else if (key == "step") {
      plan.step_ = parse_int(text, key, value, 0, std::numeric_limits<int64_t>::max());
    } else {
      bad(text, "unknown key '" + key + "'");
    }
  }
  if (plan.phase_.empty()) bad(text, "no phase=");
  if (plan.rank_ < 0) bad(text, "no rank=");
  return plan;
}

FaultPlan FaultPlan::from_env() {
  const char* text = std::getenv(kEnvVar);
  return parse(text ? text : "");
}

void FaultPlan::at(const char* phase, int rank, int64_t step) const {
  if (kind_ != FaultKind::Kill || phase_ != phase || rank_ != rank || (step_ && *step_ != step))
    return;
  std::fprintf(stderr, "fault injection: rank %d kills itself at phase %s of step %lld\n", rank,
               phase, static_cast<long long>(step));
  std::fflush(stderr);
  std::raise(SIGKILL);
}

}  // namespace mpitrain
