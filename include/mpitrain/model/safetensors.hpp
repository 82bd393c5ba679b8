// The safetensors files of a checkpoint directory, read one tensor at a time: model.safetensors,
// or the shards (model-0000N-of-0000M.safetensors) that model.safetensors.index.json maps each
// tensor to ({"metadata": {...}, "weight_map": {tensor: file}}).
//
// safetensors: u64 little-endian N, an N-byte JSON header {name: {dtype, shape, data_offsets}}
// (and "__metadata__"), then the raw little-endian tensors (offsets from the end of the header).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mpitrain {

inline constexpr const char* kSafetensorsFile = "model.safetensors";
inline constexpr const char* kSafetensorsIndex = "model.safetensors.index.json";

// One tensor as stored: its file, dtype ("F32", "BF16", ...), shape and bytes in the file.
struct StoredTensor {
  std::string file;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, bytes = 0;  // from the start of the file
};

class SafetensorsSet {
 public:
  // Reads every header. UsageError naming the file when one is missing, unreadable or not
  // safetensors, when a tensor's offsets do not fit its shape or lie outside its file, when the
  // directory holds both model.safetensors and an index, or the index names a file outside the
  // directory, a tensor twice, or a tensor its file lacks (or a file holds one it does not map).
  explicit SafetensorsSet(const std::string& dir);

  // A directory holding model.safetensors or an index.
  static bool present(const std::string& dir);

  const std::map<std::string, StoredTensor>& tensors() const { return tensors_; }
  const StoredTensor* find(const std::string& name) const;  // nullptr if absent
  // What names the set in messages: model.safetensors or the index.
  const std::string& source() const { return source_; }

  // A rectangle of the tensor seen as a matrix `width` elements wide: rows [row0, +rows) x
  // columns [col0, +cols).
  struct Block {
    int64_t width, row0, rows, col0, cols;
  };
  // The block's elements, widened to fp32 (F32, F16 or BF16 stored) into out (rows x cols,
  // row-major), as read: one read of whole rows, else one per row of its columns. Returns the
  // bytes read from the file. UsageError for another dtype or a read that fails.
  uint64_t read_block(const StoredTensor& t, const Block& b, float* out) const;

 private:
  void add_file(const std::string& path, const std::map<std::string, std::string>* weight_map);

  std::string source_;
  std::map<std::string, StoredTensor> tensors_;
};

}  // namespace mpitrain
