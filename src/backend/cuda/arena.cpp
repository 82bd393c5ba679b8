#include "mpitrain/backend/cuda/arena.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "mpitrain/backend/cuda/check.hpp"

namespace mpitrain::cuda {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
size_t aligned(size_t bytes) {
  return (bytes + DeviceArena::kAlign - 1) / DeviceArena::kAlign * DeviceArena::kAlign;
}
}  // namespace

const char* to_string(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Params:
      return "params";
    case MemoryKind::Grads:
      return "grads";
    case MemoryKind::Optimizer:
      return "optimizer";
    case MemoryKind::Activations:
      return "activations";
    case MemoryKind::Workspace:
      return "workspace";
  }
  return "?";
}

DeviceArena::~DeviceArena() {
  for (Block& b : blocks_) cudaFree(b.base);  // no throwing from a destructor
}

void DeviceArena::reserve(size_t bytes) {
  if (sealed_) MPITRAIN_THROW(std::string("device arena '") + to_string(kind_) + "' is sealed");
  bytes = aligned(bytes);
  if (bytes == 0) return;
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) {
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    cudaGetLastError();
    char msg[256];
    std::snprintf(msg, sizeof msg, "cannot reserve %.1f MiB for %s (%.1f MiB free of %.1f): %s",
                  bytes / kMiB, to_string(kind_), free / kMiB, total / kMiB,
                  cudaGetErrorString(status));
    MPITRAIN_THROW(msg);
  }
  blocks_.push_back(Block{static_cast<char*>(p), bytes, 0, {}});
  reserved_ += bytes;
}

void* DeviceArena::take(size_t bytes) {
  const size_t size = aligned(std::max<size_t>(bytes, 1));
  Block* fit = nullptr;
  for (Block& b : blocks_)
    if (b.size - b.top >= size) {
      fit = &b;
      break;
    }
  if (fit == nullptr) {
    if (sealed_) {
      char msg[256];
      std::snprintf(msg, sizeof msg,
                    "device arena '%s' is full (%.1f MiB reserved, %.1f in use) and sealed: "
                    "%.1f MiB more asked for after set-up",
                    to_string(kind_), reserved_ / kMiB, used_ / kMiB, size / kMiB);
      MPITRAIN_THROW(msg);
    }
    reserve(size);
    fit = &blocks_.back();
  }
  fit->pieces.push_back(Piece{fit->top, size, true});
  void* p = fit->base + fit->top;
  fit->top += size;
  used_ += size;
  peak_ = std::max(peak_, used_);
  return p;
}

void DeviceArena::give(void* p) {
  char* c = static_cast<char*>(p);
  for (Block& b : blocks_) {
    if (c < b.base || c >= b.base + b.size) continue;
    for (Piece& piece : b.pieces) {
      if (b.base + piece.offset != c || !piece.live) continue;
      piece.live = false;
      used_ -= piece.size;
      while (!b.pieces.empty() && !b.pieces.back().live) {  // reclaim from the top
        b.top = b.pieces.back().offset;
        b.pieces.pop_back();
      }
      return;
    }
  }
  MPITRAIN_THROW(std::string("pointer not allocated from device arena '") + to_string(kind_) + "'");
}

bool DeviceArena::owns(const void* p) const {
  const char* c = static_cast<const char*>(p);
  for (const Block& b : blocks_)
    if (c >= b.base && c < b.base + b.size) return true;
  return false;
}

void DeviceMemory::seal() {
  for (DeviceArena& a : arenas_) a.seal();
}

std::string DeviceMemory::report() const {
  std::string out = "device memory (MiB): kind reserved in-use peak\n";
  char line[160];
  size_t reserved = 0, used = 0, peak = 0;
  for (const DeviceArena& a : arenas_) {
    std::snprintf(line, sizeof line, "  %-12s %10.1f %10.1f %10.1f\n", to_string(a.kind()),
                  a.reserved() / kMiB, a.used() / kMiB, a.peak() / kMiB);
    out += line;
    reserved += a.reserved();
    used += a.used();
    peak += a.peak();
  }
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) cudaGetLastError();
  std::snprintf(line, sizeof line, "  %-12s %10.1f %10.1f %10.1f   (device: %.1f free of %.1f)",
                "total", reserved / kMiB, used / kMiB, peak / kMiB, free / kMiB, total / kMiB);
  return out + line;
}

}  // namespace mpitrain::cuda
