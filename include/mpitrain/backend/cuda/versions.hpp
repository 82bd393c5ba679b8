// The GPU libraries of a CUDA build for --version: each "loaded (built with)", asked without a
// device (a machine with no driver answers too).
#pragma once

#include <string>

namespace mpitrain::cuda {

struct LibraryVersions {
  std::string cuda;   // "runtime 13.0 (built with 13.0), driver 13.0" or ", no driver"
  std::string cudnn;  // "9.19.0 (built with 9.19.0)"
  std::string nccl;   // "2.28.3 (built with 2.28.3)", or "off (...)" when it was not found
};

LibraryVersions library_versions();

}  // namespace mpitrain::cuda
