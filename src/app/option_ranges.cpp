#include "mpitrain/app/option_ranges.hpp"

#include <cmath>
#include <cstdint>

#include "mpitrain/app/help_format.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

std::string end_text(double value) { return format_value(boost::any(value)); }

// The option's value as a double; false when it is not a number (a text or a flag).
bool numeric_value(const boost::any& v, double* out) {
  if (const auto* i = boost::any_cast<int>(&v)) return *out = *i, true;
  if (const auto* u = boost::any_cast<uint64_t>(&v)) return *out = static_cast<double>(*u), true;
  if (const auto* d = boost::any_cast<double>(&v)) return *out = *d, true;
  if (const auto* f = boost::any_cast<float>(&v)) return *out = *f, true;
  return false;
}

}  // namespace

std::string range_text(const OptionRange& r) {
  std::string text = r.hi == kUnbounded ? (r.lo_open ? "> " : ">= ") : (r.lo_open ? "(" : "[");
  text += end_text(r.lo);
  if (r.hi == kUnbounded) return text;
  text += ", ";
  text += end_text(r.hi);
  text += r.hi_open ? ")" : "]";
  return text;
}

bool in_range(const OptionRange& r, double v) {
  if (!std::isfinite(v)) return false;
  const bool above_lo = r.lo_open ? v > r.lo : v >= r.lo;
  const bool below_hi = r.hi_open ? v < r.hi : v <= r.hi;
  return above_lo && below_hi;
}

void check_ranges(const std::vector<OptionRange>& ranges,
                  const boost::program_options::variables_map& vm) {
  for (const OptionRange& r : ranges) {
    if (!vm.count(r.name)) continue;
    const boost::any& value = vm[r.name].value();
    double v = 0;
    if (!numeric_value(value, &v)) MPITRAIN_THROW(std::string(r.name) + " is not a number");
    if (in_range(r, v)) continue;
    std::string message = r.name;
    message += r.hi == kUnbounded ? " must be " : " must be in ";
    message += range_text(r);
    message += " (got ";
    message += format_value(value);
    throw UsageError(message + ")");
  }
}

std::string range_note(const std::vector<OptionRange>& ranges, const std::string& name) {
  for (const OptionRange& r : ranges)
    if (name == r.name) return "range " + range_text(r);
  return "";
}

}  // namespace mpitrain
