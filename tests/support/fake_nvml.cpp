// A stand-in for libnvidia-ml.so.1 on machines without a driver (tests/unit/test_nvml_power.cpp):
// the six functions NvmlPower resolves, with NVML's C ABI, and failures on cue. Every bus id
// names one device; its energy counter gains 1 J per call and it draws 100 W. fake_nvml_fail_from
// (energy, power): from the energy-th call of nvmlDeviceGetTotalEnergyConsumption (the
// power-th of nvmlDeviceGetPowerUsage) on, the call fails with NVML_ERROR_UNKNOWN (999); 0: never.
// The test opens this library by the same path as the meter, so both see one copy of this state.
namespace {

constexpr int kSuccess = 0, kUnknown = 999;
struct Cue {
  int energy_fails_from = 0, power_fails_from = 0;
  int energy_calls = 0, power_calls = 0;
};
Cue cue;
int device;  // its address is the device handle

bool fails(int call, int from) { return from > 0 && call >= from; }

}  // namespace

extern "C" {

void fake_nvml_fail_from(int energy, int power) { cue = {energy, power, 0, 0}; }
int fake_nvml_energy_calls() { return cue.energy_calls; }

int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }
int nvmlDeviceGetHandleByPciBusId_v2(const char*, void** handle) {
  *handle = &device;
  return kSuccess;
}
int nvmlDeviceGetTotalEnergyConsumption(void*, unsigned long long* mj) {
  if (fails(++cue.energy_calls, cue.energy_fails_from)) return kUnknown;
  *mj = 1000ull * cue.energy_calls;
  return kSuccess;
}
int nvmlDeviceGetPowerUsage(void*, unsigned int* mw) {
  if (fails(++cue.power_calls, cue.power_fails_from)) return kUnknown;
  *mw = 100000;
  return kSuccess;
}
const char* nvmlErrorString(int rc) { return rc == kUnknown ? "Unknown Error" : "Success"; }

}  // extern "C"
