// A compute tensor in backend memory and the type it is stored in.
//
// The compute tensors of a run (activations, activation gradients, the compute copy of the
// weights) are stored in the run's storage type: Fp32 (the backend's scalar T itself: float in
// the trainer, double in the gradient checks) or, under --precision bf16|fp16 where the backend
// keeps 2-byte tensors, Bf16 / Fp16 in 2 bytes each. Backend ops read a Buf's elements as T
// (exact) and round what they write to its type (round to nearest even, backend/precision.hpp).
// Everything else (parameter gradients, master weights, optimizer state, norm statistics, the
// loss) is plain T*. A T* converts to a Buf of type Fp32, so fp32 callers read as before.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpitrain/backend/precision.hpp"

namespace mpitrain {

// Bytes of one element stored as `dtype` in a backend of scalar T.
template <typename T>
constexpr size_t element_bytes(Precision dtype) {
  return dtype == Precision::Fp32 ? sizeof(T) : 2;
}

template <typename T>
class Buf {
 public:
  Buf() = default;
  Buf(std::nullptr_t) {}                                  // NOLINT: no tensor
  Buf(T* data) : data_(data) {}                           // NOLINT: a full-precision tensor
  Buf(void* data, Precision dtype) : data_(data), dtype_(dtype) {}

  void* data() const { return data_; }
  Precision dtype() const { return dtype_; }
  size_t element_size() const { return element_bytes<T>(dtype_); }
  explicit operator bool() const { return data_ != nullptr; }
  // The tensor from element n on.
  Buf operator+(size_t n) const { return {static_cast<char*>(data_) + n * element_size(), dtype_}; }
  // The elements as T (dtype Fp32) or as 2-byte bits (Bf16 / Fp16); null for the other types, so
  // an op written for one type finds out with one test.
  T* full() const { return dtype_ == Precision::Fp32 ? static_cast<T*>(data_) : nullptr; }
  uint16_t* half() const { return dtype_ != Precision::Fp32 ? static_cast<uint16_t*>(data_) : nullptr; }

 private:
  void* data_ = nullptr;
  Precision dtype_ = Precision::Fp32;
};

// The same, read-only.
template <typename T>
class CBuf {
 public:
  CBuf() = default;
  CBuf(std::nullptr_t) {}                                       // NOLINT
  CBuf(const T* data) : data_(data) {}                          // NOLINT
  CBuf(Buf<T> b) : data_(b.data()), dtype_(b.dtype()) {}        // NOLINT
  CBuf(const void* data, Precision dtype) : data_(data), dtype_(dtype) {}

  const void* data() const { return data_; }
  Precision dtype() const { return dtype_; }
  size_t element_size() const { return element_bytes<T>(dtype_); }
  explicit operator bool() const { return data_ != nullptr; }
  CBuf operator+(size_t n) const {
    return {static_cast<const char*>(data_) + n * element_size(), dtype_};
  }
  const T* full() const { return dtype_ == Precision::Fp32 ? static_cast<const T*>(data_) : nullptr; }
  const uint16_t* half() const {
    return dtype_ != Precision::Fp32 ? static_cast<const uint16_t*>(data_) : nullptr;
  }

 private:
  const void* data_ = nullptr;
  Precision dtype_ = Precision::Fp32;
};

}  // namespace mpitrain
