#include "mpitrain/backend/cuda/device.hpp"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <cstdio>

#include "mpitrain/backend/cuda/check.hpp"

namespace mpitrain::cuda {

DeviceProbe probe_devices() {
  DeviceProbe probe;
  const cudaError_t status = cudaGetDeviceCount(&probe.count);
  if (status != cudaSuccess) {
    probe.count = 0;
    probe.reason = std::string("no CUDA device usable: ") + cudaGetErrorString(status);
    cudaGetLastError();  // leave no error behind for the next call to report
  } else if (probe.count == 0) {
    probe.reason = "no CUDA device usable: the runtime sees no device";
  }
  return probe;
}

std::string describe_device(int device) {
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int driver = 0, runtime = 0;
  CUDA_CHECK(cudaDriverGetVersion(&driver));
  CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  const size_t dnn = cudnnGetVersion();
  char text[512];
  std::snprintf(text, sizeof text,
                "%s (sm_%d%d, %d SMs, %.1f GiB), driver %d.%d, runtime %d.%d, cuDNN %zu.%zu.%zu, "
                "cuBLASLt %zu",
                prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                static_cast<double>(prop.totalGlobalMem) / (1 << 30), driver / 1000,
                driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10, dnn / 10000,
                dnn % 10000 / 100, dnn % 100, cublasLtGetVersion());
  return text;
}

double free_device_memory() {
  size_t free = 0, total = 0;
  CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return static_cast<double>(free);
}

}  // namespace mpitrain::cuda
