// Device memory by kind: one arena each for parameters, gradients, optimizer state, activations
// and the backend's workspace, so the log can say where the memory of a run goes.
//
// An arena hands out 256-byte aligned pieces of large cudaMalloc'd blocks by bumping a pointer;
// freed space is reclaimed from the top of its block (pieces are freed in any order, the space
// below a live piece waits for it). Before seal() an allocation that does not fit adds a block;
// after seal() it throws — a run allocates everything in set-up (the model, the optimizer, the
// workspace), seals, and from the first step on its footprint is fixed. reserve() makes one block
// of a planned size up front.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mpitrain::cuda {

enum class MemoryKind { Params, Grads, Optimizer, Activations, Workspace };
inline constexpr int kMemoryKinds = 5;
const char* to_string(MemoryKind kind);

class DeviceArena {
 public:
  explicit DeviceArena(MemoryKind kind) : kind_(kind) {}
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  void reserve(size_t bytes);      // one more block of this size (before seal)
  void* take(size_t bytes);        // throws Error when sealed and full
  void give(void* p);              // p from take(); throws Error for a foreign pointer
  bool owns(const void* p) const;  // p lies in one of this arena's blocks
  void seal() { sealed_ = true; }

  MemoryKind kind() const { return kind_; }
  size_t reserved() const { return reserved_; }  // bytes in blocks
  size_t used() const { return used_; }          // bytes in live pieces (with alignment)
  size_t peak() const { return peak_; }          // most bytes ever in live pieces
  static constexpr size_t kAlign = 256;

 private:
  struct Piece {
    size_t offset, size;
    bool live;
  };
  struct Block {
    char* base;
    size_t size, top;
    std::vector<Piece> pieces;  // in address order
  };
  MemoryKind kind_;
  bool sealed_ = false;
  std::vector<Block> blocks_;
  size_t reserved_ = 0, used_ = 0, peak_ = 0;
};

// The five arenas and their report.
class DeviceMemory {
 public:
  DeviceArena& arena(MemoryKind kind) { return arenas_[static_cast<int>(kind)]; }
  const DeviceArena& arena(MemoryKind kind) const { return arenas_[static_cast<int>(kind)]; }
  void seal();
  // One line per kind and a total: reserved, in use, peak (MiB), and the device's free memory.
  std::string report() const;

 private:
  std::array<DeviceArena, kMemoryKinds> arenas_{
      DeviceArena(MemoryKind::Params), DeviceArena(MemoryKind::Grads),
      DeviceArena(MemoryKind::Optimizer), DeviceArena(MemoryKind::Activations),
      DeviceArena(MemoryKind::Workspace)};
};

}  // namespace mpitrain::cuda
