// The CUDA backend keeps every compute tensor in fp32 for now (cuda_backend.hpp): its ops take
// the fp32 elements of their Bufs through fp32(), which throws Error for a tensor stored in
// bf16 / fp16 instead of reading 2-byte bits as floats. A null Buf is no tensor: null.
#pragma once

#include <string>

#include "mpitrain/backend/buf.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain::cuda {

inline void require_fp32(Precision dtype) {
  if (dtype == Precision::Fp32) return;
  std::string msg = "CUDA backend: a compute tensor stored in ";
  msg += to_string(dtype);
  msg += ": not on the GPU backend yet (it keeps compute tensors in fp32)";
  throw Error(msg);
}

template <typename T>
T* fp32(Buf<T> b) {
  if (b) require_fp32(b.dtype());
  return b.full();
}

template <typename T>
const T* fp32(CBuf<T> b) {
  if (b) require_fp32(b.dtype());
  return b.full();
}

}  // namespace mpitrain::cuda
