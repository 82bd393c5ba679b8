#include "mpitrain/monitor/nvml_power.hpp"

#include <dlfcn.h>

#include <cstdio>

namespace mpitrain {

namespace {

// NVML's types, as nvml.h declares them (its ABI): an int status (0 = success), an opaque
// device handle.
using NvmlReturn = int;
constexpr NvmlReturn kNvmlSuccess = 0;
struct NvmlDeviceSt;
using NvmlDevice = NvmlDeviceSt*;

}  // namespace

struct NvmlPower::Api {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  NvmlReturn (*by_pci_bus_id)(const char*, NvmlDevice*);
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*);  // mJ since the driver loaded
  NvmlReturn (*power_usage)(NvmlDevice, unsigned int*);         // mW
  const char* (*error_string)(NvmlReturn);
  std::string error(const char* call, NvmlReturn rc) const {  // a partial NVML may lack the text
    const char* text = error_string(rc);
    return std::string(call) + " failed: " + (text ? text : "no error text") + " (" +
           std::to_string(rc) + ")";
  }
};

NvmlPower::NvmlPower(const std::string& pci_bus_id, const std::string& library)
    : pci_bus_id_(pci_bus_id), lib_(dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL), dlclose) {
  if (!lib_) {
    const char* why = dlerror();
    reason_ = "NVML not loadable (" + (why ? std::string(why) : library) + ")";
    return;
  }
  auto resolve = [&](const char* name) {
    void* f = dlsym(lib_.get(), name);
    if (!f && reason_.empty()) reason_ = library + " has no " + name;
    return f;
  };
  api_ = std::make_unique<Api>();
  api_->init = reinterpret_cast<NvmlReturn (*)()>(resolve("nvmlInit_v2"));
  api_->shutdown = reinterpret_cast<NvmlReturn (*)()>(resolve("nvmlShutdown"));
  api_->by_pci_bus_id = reinterpret_cast<NvmlReturn (*)(const char*, NvmlDevice*)>(
      resolve("nvmlDeviceGetHandleByPciBusId_v2"));
  api_->total_energy = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned long long*)>(
      resolve("nvmlDeviceGetTotalEnergyConsumption"));
  api_->power_usage = reinterpret_cast<NvmlReturn (*)(NvmlDevice, unsigned int*)>(
      resolve("nvmlDeviceGetPowerUsage"));
  api_->error_string =
      reinterpret_cast<const char* (*)(NvmlReturn)>(resolve("nvmlErrorString"));
  if (!reason_.empty()) return;
  if (const NvmlReturn rc = api_->init(); rc != kNvmlSuccess) {
    reason_ = api_->error("nvmlInit_v2", rc);
    return;
  }
  initialised_ = true;
  NvmlDevice device = nullptr;
  if (const NvmlReturn rc = api_->by_pci_bus_id(pci_bus_id.c_str(), &device); rc != kNvmlSuccess) {
    reason_ = api_->error(("nvmlDeviceGetHandleByPciBusId_v2(" + pci_bus_id + ")").c_str(), rc);
    return;
  }
  counter_ = api_->total_energy(device, &start_mj_) == kNvmlSuccess;
  if (!counter_) {
    unsigned int mw = 0;
    if (const NvmlReturn rc = api_->power_usage(device, &mw); rc != kNvmlSuccess) {
      reason_ = "no energy counter, and " + api_->error("nvmlDeviceGetPowerUsage", rc);
      return;
    }
    last_w_ = 1e-3 * mw;
    last_t_ = Clock::now();
  }
  device_ = device;
}

NvmlPower::~NvmlPower() {
  if (initialised_) api_->shutdown();  // before lib_ is closed (members go in reverse order)
}

void NvmlPower::stop(const std::string& why) {
  device_ = nullptr;
  reason_ = why;
  std::fprintf(stderr, "NVML (GPU %s): %s: energy not reported from now on\n",
               pci_bus_id_.c_str(), why.c_str());
}

std::optional<double> NvmlPower::power_watts() {
  if (!available()) return std::nullopt;
  unsigned int mw = 0;
  const NvmlReturn rc = api_->power_usage(static_cast<NvmlDevice>(device_), &mw);
  if (rc != kNvmlSuccess) {
    stop(api_->error("nvmlDeviceGetPowerUsage", rc));
    return std::nullopt;
  }
  return 1e-3 * mw;
}

std::optional<double> NvmlPower::energy_joules() {
  if (!available()) return std::nullopt;
  if (counter_) {
    unsigned long long mj = 0;
    const NvmlReturn rc = api_->total_energy(static_cast<NvmlDevice>(device_), &mj);
    if (rc != kNvmlSuccess) {
      stop(api_->error("nvmlDeviceGetTotalEnergyConsumption", rc));
      return std::nullopt;
    }
    return 1e-3 * static_cast<double>(mj - start_mj_);
  }
  const std::optional<double> w = power_watts();
  if (!w) return std::nullopt;
  const Clock::time_point t = Clock::now();
  integrated_j_ += 0.5 * (*w + last_w_) * std::chrono::duration<double>(t - last_t_).count();
  last_w_ = *w;
  last_t_ = t;
  return integrated_j_;
}

}  // namespace mpitrain
