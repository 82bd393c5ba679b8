#include "mpitrain/backend/cuda/check.hpp"

#include <string>

namespace mpitrain::cuda {

void throw_cuda(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(where(
      file, line,
      std::string(call) + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status)));
}

void throw_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(where(file, line,
                    std::string(call) + ": " + cublasLtGetStatusName(status) + ": " +
                        cublasLtGetStatusString(status)));
}

void throw_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  char last[1024] = {};
  cudnnGetLastErrorString(last, sizeof last);
  std::string what = std::string(call) + ": " + cudnnGetErrorString(status);
  if (last[0] != '\0') what += std::string(" (") + last + ")";
  throw Error(where(file, line, what));
}

void check_launch(const char* file, int line) {
  const cudaError_t launch = cudaGetLastError();
  if (launch != cudaSuccess) throw_cuda(launch, "kernel launch", file, line);
#ifndef NDEBUG
  const cudaError_t run = cudaDeviceSynchronize();
  if (run != cudaSuccess)
    throw_cuda(run, "kernel (debug build: synchronised after launch)", file, line);
#endif
}

}  // namespace mpitrain::cuda
