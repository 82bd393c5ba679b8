// Is a CUDA device usable here? Asks the CUDA runtime only (the binary links no driver library),
// so it answers on any machine: without a driver, cudaGetDeviceCount fails and the reason is the
// runtime's own text, e.g. "no CUDA device usable: CUDA driver version is insufficient for CUDA
// runtime version".
#pragma once

#include <string>

namespace mpitrain::cuda {

struct DeviceProbe {
  int count = 0;       // usable devices (0 when none)
  std::string reason;  // why none is usable; empty when count > 0
};

DeviceProbe probe_devices();

// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB), driver 13.0, runtime 13.0, cuDNN 9.19.0, cuBLASLt
// 130100" for device d; throws Error when it cannot be queried.
std::string describe_device(int device);

// Bytes free on the current device now (cudaMemGetInfo); throws Error when it cannot be asked.
double free_device_memory();

}  // namespace mpitrain::cuda
