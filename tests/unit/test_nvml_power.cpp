// The NVML loader where it cannot work: no library of that name, or no device at that bus id.
// available() is false with the reason, and reading throws instead of crashing.
#include <gtest/gtest.h>

#include "mpitrain/monitor/nvml_power.hpp"
#include "mpitrain/runtime/error.hpp"

using namespace mpitrain;

TEST(NvmlPower, AbsentLibraryIsNotAvailable) {
  NvmlPower nvml("0000:00:00.0", "libnvidia-ml-absent.so.1");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.reason().find("libnvidia-ml-absent.so.1"), std::string::npos) << nvml.reason();
  EXPECT_THROW(nvml.power_watts(), Error);
  EXPECT_THROW(nvml.energy_joules(), Error);
}

// A library that loads but is not NVML (libc): a missing symbol is named.
TEST(NvmlPower, LibraryWithoutNvmlIsNotAvailable) {
  NvmlPower nvml("0000:00:00.0", "libc.so.6");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.reason().find("has no nvmlInit_v2"), std::string::npos) << nvml.reason();
}

// The real library where there is one (a GPU machine), otherwise its absence: either way no
// device answers to a bus id that no machine has.
TEST(NvmlPower, NoDeviceAtAnUnknownBusId) {
  NvmlPower nvml("ffff:ff:1f.7");
  EXPECT_FALSE(nvml.available());
  EXPECT_FALSE(nvml.reason().empty());
}
