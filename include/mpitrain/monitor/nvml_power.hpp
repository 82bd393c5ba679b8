// GPU power and energy from NVML, loaded at run time.
//
// libnvidia-ml.so.1 comes with the driver, not the toolkit, so it is opened with dlopen when a
// run asks (never a link-time dependency: the binaries start on machines without a driver) and
// its five functions are resolved by name; the few NVML types used are declared in the .cpp.
// Without the library, or without a device at that PCI bus id, or when its first reading fails,
// available() is false, reason() says why, and the trainer leaves the power and energy fields
// out; construction never throws, so every rank reaches the agreement on whether all GPUs have
// a meter (train/device_setup.cpp). A reading that fails later (a transient error, the partial
// NVML of a sandboxed runtime) makes the meter unavailable from then on: the reading is nullopt,
// reason() says why, and one line on stderr says so, once.
//
// Energy: the device's total-energy counter (Volta and later, millijoules) minus its value at
// construction; on devices without the counter, the power readings integrated over the times of
// the calls (trapezoids), so sample it regularly (every step). Not thread-safe: one thread reads.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace mpitrain {

class NvmlPower {
 public:
  // pci_bus_id: as cudaDeviceGetPCIBusId writes it ("0000:3B:00.0"); library: the name to dlopen.
  explicit NvmlPower(const std::string& pci_bus_id,
                     const std::string& library = "libnvidia-ml.so.1");
  ~NvmlPower();
  NvmlPower(const NvmlPower&) = delete;
  NvmlPower& operator=(const NvmlPower&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& reason() const { return reason_; }  // why not available; "" when it is

  // nullopt when !available(), or when NVML fails now (then from now on; see above).
  std::optional<double> power_watts();    // the board's draw now (NVML averages over ~1 s)
  std::optional<double> energy_joules();  // since construction

 private:
  struct Api;  // the resolved functions
  using Clock = std::chrono::steady_clock;
  void stop(const std::string& why);  // a reading failed: unavailable from now on

  std::string pci_bus_id_;
  std::unique_ptr<void, int (*)(void*)> lib_;  // dlopen handle, dlclose'd
  std::unique_ptr<Api> api_;
  bool initialised_ = false;  // nvmlInit_v2 succeeded: nvmlShutdown on destruction
  void* device_ = nullptr;    // nvmlDevice_t; null: not available
  std::string reason_;
  bool counter_ = false;  // the total-energy counter works
  unsigned long long start_mj_ = 0;
  double integrated_j_ = 0, last_w_ = 0;  // without the counter
  Clock::time_point last_t_;
};

}  // namespace mpitrain
