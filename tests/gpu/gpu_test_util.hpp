// Helpers of the GPU tests: device buffers filled from host vectors, outputs poisoned with NaN
// before each run (so an element a kernel forgot to write shows up), and the normwise relative
// error ||out - ref||_2 / ||ref||_2 against a CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "../support/random_values.hpp"
#include "mpitrain/backend/cuda_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain::gpu_testing {

using test_inputs::random_floats;

// ||a - b|| / ||b|| (2-norms, in double); NaN anywhere in a gives NaN, which fails every bound.
template <class A, class B>
double rel_l2(const std::vector<A>& a, const std::vector<B>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Values that test rounding to bf16 / fp16: beyond fp16's range (overflow to inf), fp16
// subnormals, a bf16 tie, and 65520 (fp16: rounds to inf).
inline std::vector<float> rounding_cases() {
  std::vector<float> x = random_floats(4096, 1, -70000.0f, 70000.0f);
  const std::vector<float> small = random_floats(1024, 2, -1e-6f, 1e-6f);
  x.insert(x.end(), small.begin(), small.end());
  x.push_back(1.0f + 1.0f / 256);
  x.push_back(65520.0f);
  return x;
}

// LayerNorm (layer) or RMSNorm forward then backward on any backend and tensor types; mean and
// db are unused by RMSNorm.
template <class Be, class Out, class In, class S>
void norm_forward_backward(Be& be, bool layer, Out out, S* mean, S* rstd, In x, In w, In b, In dy,
                           Out dx, S* dw, S* db, int N, int C, S eps) {
  if (layer) {
    be.layernorm_forward(out, mean, rstd, x, w, b, N, C, eps);
    be.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
  } else {
    be.rmsnorm_forward(out, rstd, x, w, N, C, eps);
    be.rmsnorm_backward(dx, dw, dy, x, w, rstd, N, C);
  }
}

// A device buffer of the backend, freed with it.
class DeviceVec {
 public:
  DeviceVec(CudaBackend<float>& be, size_t n) : be_(be), n_(n), p_(be.alloc(n)) {}
  DeviceVec(CudaBackend<float>& be, const std::vector<float>& host) : DeviceVec(be, host.size()) {
    upload(host);
  }
  ~DeviceVec() { be_.free(p_); }
  DeviceVec(const DeviceVec&) = delete;
  DeviceVec& operator=(const DeviceVec&) = delete;
  float* get() { return p_; }
  size_t size() const { return n_; }
  void upload(const std::vector<float>& host) {
    be_.to_device(p_, host.data(), n_ * sizeof(float));
  }
  void poison() { upload(std::vector<float>(n_, std::numeric_limits<float>::quiet_NaN())); }
  std::vector<float> download() const {
    std::vector<float> host(n_);
    be_.to_host(host.data(), p_, n_ * sizeof(float));
    return host;
  }

 private:
  CudaBackend<float>& be_;
  size_t n_;
  float* p_;
};

// int32 tokens / targets on the device.
class DeviceInts {
 public:
  DeviceInts(CudaBackend<float>& be, const std::vector<int32_t>& host)
      : be_(be),
        p_(static_cast<int32_t*>(
            be.alloc_bytes(cuda::MemoryKind::Activations, host.size() * sizeof(int32_t)))),
        n_(host.size()) {
    be_.to_device(p_, host.data(), host.size() * sizeof(int32_t));
  }
  ~DeviceInts() { be_.free_bytes(p_); }
  DeviceInts(const DeviceInts&) = delete;
  DeviceInts& operator=(const DeviceInts&) = delete;
  const int32_t* get() const { return p_; }
  // New values of the same count: no allocation, so it may follow seal_memory().
  void upload(const std::vector<int32_t>& host) {
    if (host.size() != n_) MPITRAIN_THROW("DeviceInts::upload: another size");
    be_.to_device(p_, host.data(), n_ * sizeof(int32_t));
  }

 private:
  CudaBackend<float>& be_;
  int32_t* p_;
  size_t n_;
};

}  // namespace mpitrain::gpu_testing
