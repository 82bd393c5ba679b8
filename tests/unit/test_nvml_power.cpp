// The NVML loader where it cannot work: no library of that name, or no device at that bus id;
// and, through a stand-in NVML library (tests/support/fake_nvml.cpp, loaded by the meter's own
// dlopen), readings that fail at construction or mid-run. Never a throw: available() is false
// with the reason, and the readings are nullopt.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "mpitrain/monitor/nvml_power.hpp"

using namespace mpitrain;

namespace {

// The stand-in library, opened here too (the same copy the meter opens), for its cues.
struct FakeNvml {
  std::unique_ptr<void, int (*)(void*)> lib{dlopen(MPITRAIN_FAKE_NVML, RTLD_NOW | RTLD_LOCAL),
                                            dlclose};
  template <typename F>
  F* fn(const char* name) {
    return reinterpret_cast<F*>(lib ? dlsym(lib.get(), name) : nullptr);
  }
  // From the energy-th counter reading (the power-th power reading) on, NVML fails; 0: never.
  void fail_from(int energy, int power) {
    auto* f = fn<void(int, int)>("fake_nvml_fail_from");
    ASSERT_NE(f, nullptr) << MPITRAIN_FAKE_NVML;
    f(energy, power);
  }
  int energy_calls() { return fn<int()>("fake_nvml_energy_calls")(); }
};

}  // namespace

TEST(NvmlPower, AbsentLibraryIsNotAvailable) {
  NvmlPower nvml("0000:00:00.0", "libnvidia-ml-absent.so.1");
  EXPECT_FALSE(nvml.available());
  EXPECT_NE(nvml.reason().find("libnvidia-ml-absent.so.1"), std::string::npos) << nvml.reason();
  EXPECT_FALSE(nvml.power_watts());
  EXPECT_FALSE(nvml.energy_joules());
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

// The counter reads (1 J a call in the stand-in), then fails: from then on no energy, the reason
// says which call failed, one line on stderr says so once, and NVML is not asked again.
TEST(NvmlPower, FailedReadingMidRunStopsReportingForGood) {
  FakeNvml fake;
  fake.fail_from(3, 0);  // calls: 1 at construction, 2 reads, 3 fails
  NvmlPower nvml("0000:3b:00.0", MPITRAIN_FAKE_NVML);
  ASSERT_TRUE(nvml.available()) << nvml.reason();
  EXPECT_EQ(nvml.energy_joules(), 1.0);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(nvml.energy_joules());
  EXPECT_FALSE(nvml.energy_joules());
  EXPECT_FALSE(nvml.power_watts());
  const std::string printed = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.reason(), "nvmlDeviceGetTotalEnergyConsumption failed: Unknown Error (999)");
  EXPECT_EQ(printed,
            "NVML (GPU 0000:3b:00.0): nvmlDeviceGetTotalEnergyConsumption failed: Unknown Error "
            "(999): energy not reported from now on\n");
  EXPECT_EQ(fake.energy_calls(), 3);
}

// No counter and no power reading at construction: not available, no throw (every rank must
// reach the agreement on the meters), nothing printed (start-up prints the reason).
TEST(NvmlPower, FailedFirstReadingIsNotAvailable) {
  FakeNvml fake;
  fake.fail_from(1, 1);
  testing::internal::CaptureStderr();
  NvmlPower nvml("0000:3b:00.0", MPITRAIN_FAKE_NVML);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_FALSE(nvml.available());
  EXPECT_EQ(nvml.reason(), "no energy counter, and nvmlDeviceGetPowerUsage failed: Unknown Error "
                           "(999)");
  EXPECT_FALSE(nvml.energy_joules());
}

// No counter: the power readings (100 W in the stand-in) integrated over the calls' times.
TEST(NvmlPower, WithoutCounterIntegratesPower) {
  FakeNvml fake;
  fake.fail_from(1, 0);
  const auto before = std::chrono::steady_clock::now();
  NvmlPower nvml("0000:3b:00.0", MPITRAIN_FAKE_NVML);
  const auto after = std::chrono::steady_clock::now();
  ASSERT_TRUE(nvml.available()) << nvml.reason();
  EXPECT_EQ(nvml.power_watts(), 100.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto read_before = std::chrono::steady_clock::now();
  const std::optional<double> j = nvml.energy_joules();
  const auto read_after = std::chrono::steady_clock::now();
  ASSERT_TRUE(j);
  const auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  EXPECT_GE(*j, 100.0 * seconds(read_before - after));  // 100 W over the time between the calls
  EXPECT_LE(*j, 100.0 * seconds(read_after - before));
}
