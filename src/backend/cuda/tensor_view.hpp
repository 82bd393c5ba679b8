// A compute tensor as the kernels see it: device address and storage type (fp32, bf16, fp16).
// In reads element i as float (exact); Out's element i reads as float and rounds what is written
// to its type (nearest even; fp16 overflows to inf) — one kernel source for every storage type,
// computing in fp32. Built on the host from a Buf (or a float*: fp32); the element access is
// device code (.cu files only).
#pragma once

#include <cstddef>
#include <type_traits>

#include "mpitrain/backend/buf.hpp"

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#define MPITRAIN_HD __host__ __device__ __forceinline__
#else
#define MPITRAIN_HD inline
#endif

namespace mpitrain::cuda {

MPITRAIN_HD size_t storage_bytes(Precision dtype) { return dtype == Precision::Fp32 ? 4 : 2; }

#ifdef __CUDACC__
template <class E>
__device__ __forceinline__ float load_as_float(const void* p, size_t i) {
  if constexpr (sizeof(E) == 4) {
    return static_cast<const float*>(p)[i];
  } else if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  } else {
    return __half2float(static_cast<const __half*>(p)[i]);
  }
}
template <class E>
__device__ __forceinline__ void store_rounded(void* p, size_t i, float v) {
  if constexpr (sizeof(E) == 4) {
    static_cast<float*>(p)[i] = v;
  } else if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  }
}
__device__ __forceinline__ float load(const void* p, Precision t, size_t i) {
  if (t == Precision::Fp32) return load_as_float<float>(p, i);
  if (t == Precision::Bf16) return load_as_float<__nv_bfloat16>(p, i);
  return load_as_float<__half>(p, i);
}
__device__ __forceinline__ void store(void* p, Precision t, size_t i, float v) {
  if (t == Precision::Fp32) return store_rounded<float>(p, i, v);
  if (t == Precision::Bf16) return store_rounded<__nv_bfloat16>(p, i, v);
  store_rounded<__half>(p, i, v);
}
#endif

class In {
 public:
  In() = default;
  MPITRAIN_HD In(std::nullptr_t) {}          // NOLINT: no tensor
  MPITRAIN_HD In(const float* p) : p_(p) {}  // NOLINT: fp32
  MPITRAIN_HD In(const void* p, Precision t) : p_(p), t_(t) {}
  In(CBuf<float> b) : p_(b.data()), t_(b.dtype()) {}  // NOLINT
  In(Buf<float> b) : p_(b.data()), t_(b.dtype()) {}   // NOLINT
  MPITRAIN_HD const void* data() const { return p_; }
  MPITRAIN_HD Precision dtype() const { return t_; }
  MPITRAIN_HD bool operator==(std::nullptr_t) const { return p_ == nullptr; }
  MPITRAIN_HD In operator+(size_t n) const {
    return {static_cast<const char*>(p_) + n * storage_bytes(t_), t_};
  }
#ifdef __CUDACC__
  __device__ __forceinline__ float operator[](size_t i) const { return load(p_, t_, i); }
#endif

 private:
  const void* p_ = nullptr;
  Precision t_ = Precision::Fp32;
};

class Out {
 public:
  Out() = default;
  MPITRAIN_HD Out(std::nullptr_t) {}    // NOLINT: no tensor
  MPITRAIN_HD Out(float* p) : p_(p) {}  // NOLINT: fp32
  MPITRAIN_HD Out(void* p, Precision t) : p_(p), t_(t) {}
  Out(Buf<float> b) : p_(b.data()), t_(b.dtype()) {}  // NOLINT
  MPITRAIN_HD void* data() const { return p_; }
  MPITRAIN_HD Precision dtype() const { return t_; }
  MPITRAIN_HD bool operator==(std::nullptr_t) const { return p_ == nullptr; }
  MPITRAIN_HD operator In() const { return {p_, t_}; }  // NOLINT: read what was written
  MPITRAIN_HD Out operator+(size_t n) const {
    return {static_cast<char*>(p_) + n * storage_bytes(t_), t_};
  }
#ifdef __CUDACC__
  // One element: reads as float, assignment rounds to the tensor's type.
  class Ref {
   public:
    __device__ Ref(void* p, Precision t, size_t i) : p_(p), t_(t), i_(i) {}
    __device__ operator float() const { return load(p_, t_, i_); }  // NOLINT
    __device__ Ref& operator=(float v) {
      store(p_, t_, i_, v);
      return *this;
    }
    __device__ Ref& operator=(const Ref& r) { return *this = static_cast<float>(r); }
    __device__ Ref& operator+=(float v) { return *this = static_cast<float>(*this) + v; }
    __device__ Ref& operator-=(float v) { return *this = static_cast<float>(*this) - v; }

   private:
    void* p_;
    Precision t_;
    size_t i_;
  };
  __device__ __forceinline__ Ref operator[](size_t i) const { return Ref(p_, t_, i); }
#endif

 private:
  void* p_ = nullptr;
  Precision t_ = Precision::Fp32;
};

}  // namespace mpitrain::cuda

#undef MPITRAIN_HD
