// CPU backend: the scratch behind its 2-byte tensors' staged ops (see cpu_storage.hpp).
#include "cpu_storage.hpp"

#include <cstdlib>
#include <new>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain::cpu {

void ScratchBuffer::Free::operator()(void* p) const { std::free(p); }

void* ScratchBuffer::reserve(size_t bytes) {
  bytes = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  if (bytes > bytes_) {
    data_.reset();  // the old contents are not needed: free first, keeping the peak low
    bytes_ = 0;
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    data_.reset(p);
    bytes_ = bytes;
  }
  return data_.get();
}

size_t Staging::bytes() const {
  size_t sum = 0;
  for (const ScratchBuffer& slot : slots_) sum += slot.bytes();
  return sum;
}

void throw_mixed_storage() {
  MPITRAIN_THROW("an op's compute tensors must all have one storage type (fp32, bf16 or fp16)");
}

void StagingDelete::operator()(Staging* p) const { delete p; }

}  // namespace mpitrain::cpu
