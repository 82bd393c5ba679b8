// Checks for every CUDA runtime, cuBLAS(Lt) and cuDNN call: a failure throws mpitrain::Error with
// file:line, the call and the library's own error text (for cuDNN also its last-error message).
// After every kernel launch, CUDA_CHECK_LAUNCH() reads the launch error; in debug builds (no
// NDEBUG) it also waits for the kernel, so an error in it is reported at its own launch.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain::cuda {

[[noreturn]] void throw_cuda(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas(cublasStatus_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cudnn(cudnnStatus_t status, const char* call, const char* file, int line);

// cuDNN has no engine (or no buildable plan) for a graph: the caller falls back to its own kernel.
class CudnnUnsupported : public Error {
 public:
  using Error::Error;
};

// The synchronising part of CUDA_CHECK_LAUNCH in debug builds.
void check_launch(const char* file, int line);

}  // namespace mpitrain::cuda

#define CUDA_CHECK(call)                                                         \
  do {                                                                           \
    const cudaError_t mpitrain_status_ = (call);                                 \
    if (mpitrain_status_ != cudaSuccess)                                         \
      ::mpitrain::cuda::throw_cuda(mpitrain_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                         \
  do {                                                                             \
    const cublasStatus_t mpitrain_status_ = (call);                                \
    if (mpitrain_status_ != CUBLAS_STATUS_SUCCESS)                                 \
      ::mpitrain::cuda::throw_cublas(mpitrain_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDNN_CHECK(call)                                                         \
  do {                                                                            \
    const cudnnStatus_t mpitrain_status_ = (call);                                \
    if (mpitrain_status_ != CUDNN_STATUS_SUCCESS)                                 \
      ::mpitrain::cuda::throw_cudnn(mpitrain_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUDA_CHECK_LAUNCH() ::mpitrain::cuda::check_launch(__FILE__, __LINE__)
