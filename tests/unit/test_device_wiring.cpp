// --device cuda: the GPU a rank's backend is given is the one the device choice made for it
// (local rank % visible), not the runtime's default device 0 (which put every rank on GPU 0).
// The selection logic over a fake device count; no GPU needed.
#include <gtest/gtest.h>

#include "mpitrain/runtime/device.hpp"
#include "mpitrain/train/device_setup.hpp"

namespace mpitrain {
namespace {

#ifdef MPITRAIN_HAVE_CUDA
TEST(DeviceWiring, TheBackendTakesTheChosenGpu) {
  TrainConfig t;
  t.device = "cuda";
  for (const int visible : {1, 2, 4, 8})
    for (const int local_size : {1, 2, 4, 8})
      for (int local_rank = 0; local_rank < local_size; ++local_rank) {
        DeviceSetup devices;
        devices.device = choose_device(local_rank, local_size, visible).device;
        const CudaOptions c = cuda_options(t, Precision::Bf16, devices);
        EXPECT_EQ(c.device, local_rank % visible)
            << "local rank " << local_rank << " of " << local_size << ", " << visible << " GPUs";
        EXPECT_EQ(c.math, GemmMath::Bf16);
      }
}
#else
TEST(DeviceWiring, TheBackendTakesTheChosenGpu) {
  GTEST_SKIP() << "this build has no CUDA backend (MPITRAIN_CUDA=OFF)";
}
#endif

}  // namespace
}  // namespace mpitrain
