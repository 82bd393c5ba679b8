#include "mpitrain/backend/precision.hpp"

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::Fp32;
  if (name == "bf16") return Precision::Bf16;
  if (name == "fp16") return Precision::Fp16;
  throw UsageError("precision '" + name + "' is not one of fp32, bf16, fp16");
}

std::string to_string(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
  }
  return "?";
}

}  // namespace mpitrain
