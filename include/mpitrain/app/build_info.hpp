// --version: the trainer's version and build, and the libraries it runs with (the versions it
// was built against where a library says, and those loaded now), one line each.
#pragma once

#include <string>

namespace mpitrain {

// "trainer 1.0.0+abc\n  compiler ...\n  CUDA ...\n  cuDNN ...\n  NCCL ...\n  MPI ...\n  HDF5 ...\n
//  BLAS ...\n  oneDNN ...\n": CUDA, cuDNN and NCCL "off (...)" in a build without them.
std::string build_info(const std::string& program);

}  // namespace mpitrain
