// GoogleTest main of the GPU tests: without a usable CUDA device every test would be meaningless,
// so the binary says why and exits 77, which ctest reports as skipped (SKIP_RETURN_CODE).
#include <gtest/gtest.h>

#include <cstdio>

#include "mpitrain/backend/cuda/device.hpp"

int main(int argc, char** argv) {
  const mpitrain::cuda::DeviceProbe probe = mpitrain::cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("SKIP: %s\n", probe.reason.c_str());  // "no CUDA device usable: <why>"
    return 77;
  }
  std::printf("%s\n", mpitrain::cuda::describe_device(0).c_str());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
