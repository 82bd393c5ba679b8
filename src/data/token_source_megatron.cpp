// Megatron-LM's indexed datasets (megatron/core/datasets/indexed_dataset.py, what its
// preprocess_data.py writes): PREFIX.bin holds the tokens of every sequence back to back, uint16
// or int32; PREFIX.idx describes them:
//   "MMIDIDX\0\0" | version u64 = 1 | dtype code u8 (8 uint16, 4 int32) | sequences S u64 |
//   document indices D u64 | lengths int32[S] | byte pointers int64[S] | document indices int64[D]
//   [| modes int8[S]: multimodal, refused]
// The tokens are read as one array (documents in stored order, each with the end token that
// --append-eod gave it), mapped read-only: the .idx is checked in O(1) (its size, the first
// pointer 0 and the last sequence ending where the .bin does), its arrays are not read.
#include <array>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "mpitrain/runtime/error.hpp"
#include "token_source_formats.hpp"

namespace mpitrain {

namespace {

constexpr std::array<char, 9> kIdxMagic = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr uint64_t kIdxHeaderBytes = 9 + 8 + 1 + 8 + 8;

// Little-endian `T` at byte `at` of in (false if the file is shorter).
template <typename T>
bool read_at(std::ifstream& in, uint64_t at, T& value) {
  in.clear();
  in.seekg(static_cast<std::streamoff>(at));
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&value), sizeof value));
}

}  // namespace

bool is_megatron_index(const std::string& idx_path) {
  std::ifstream in(idx_path, std::ios::binary);
  std::array<char, 9> magic{};
  return in.read(magic.data(), magic.size()) && magic == kIdxMagic;
}

std::unique_ptr<TokenSource> open_megatron_tokens(const std::string& path) {
  const std::filesystem::path given(path);
  require(given.extension() != ".idx",
          "'" + path + "' is a Megatron index; name its data: '" +
              given.parent_path().append(given.stem().string()).string() + ".bin' or the prefix");
  const std::string prefix =
      given.extension() == ".bin" ? (given.parent_path() / given.stem()).string() : path;
  const std::string bin = prefix + ".bin", idx = prefix + ".idx";
  std::error_code ec;
  require(std::filesystem::is_regular_file(bin, ec) && std::filesystem::is_regular_file(idx, ec),
          "'" + path + "': a Megatron dataset is two files, '" + bin + "' and '" + idx + "', and " +
              (std::filesystem::exists(bin, ec) ? idx : bin) + " is missing");
  std::ifstream in(idx, std::ios::binary);
  require(in.good(), "cannot read '" + idx + "': " + std::strerror(errno));
  const std::string at = "'" + idx + "': ";
  require(is_megatron_index(idx), at + "not a Megatron index (no MMIDIDX header)");
  uint64_t version = 0, sequences = 0, documents = 0;
  uint8_t code = 0;
  require(read_at(in, 9, version) && read_at(in, 17, code) && read_at(in, 18, sequences) &&
              read_at(in, 26, documents),
          at + "truncated in its header");
  require(version == 1, at + "index version " + std::to_string(version) + "; expected 1");
  require(code == 8 || code == 4,
          at + "dtype code " + std::to_string(code) +
              "; token ids are uint16 (8) or int32 (4), as Megatron's preprocessing writes them");
  const uint64_t idx_bytes = std::filesystem::file_size(idx);
  const uint64_t limit = (idx_bytes - kIdxHeaderBytes) / 8;  // no count can exceed it
  require(idx_bytes >= kIdxHeaderBytes && sequences <= limit && documents <= limit,
          at + "its header declares " + std::to_string(sequences) + " sequences and " +
              std::to_string(documents) + " document indices, more than its " +
              std::to_string(idx_bytes) + " bytes hold");
  const uint64_t arrays = kIdxHeaderBytes + 12 * sequences + 8 * documents;
  require(idx_bytes != arrays + sequences || sequences == 0,
          at + "a multimodal index (a mode per sequence): only token sequences are read");
  require(idx_bytes == arrays, at + std::to_string(idx_bytes) + " bytes, where its " +
                                   std::to_string(sequences) + " sequences and " +
                                   std::to_string(documents) + " document indices take " +
                                   std::to_string(arrays) + ": truncated or corrupt");
  const int width = code == 8 ? 2 : 4;
  const uint64_t bin_bytes = std::filesystem::file_size(bin);
  require(bin_bytes % width == 0, "'" + bin + "': " + std::to_string(bin_bytes) +
                                      " bytes, not a whole number of " + std::to_string(width) +
                                      "-byte tokens");
  if (sequences > 0) {  // the sequences lie back to back from byte 0 to the .bin's end
    int64_t first = -1, last = -1;
    int32_t last_length = -1;
    const uint64_t pointers = kIdxHeaderBytes + 4 * sequences;
    require(read_at(in, pointers, first) && read_at(in, pointers + 8 * (sequences - 1), last) &&
                read_at(in, kIdxHeaderBytes + 4 * (sequences - 1), last_length),
            at + "truncated");
    const bool inside = last >= 0 && last_length >= 0 && static_cast<uint64_t>(last) <= bin_bytes;
    const int64_t end = inside ? last + int64_t{last_length} * width : -1;  // no overflow
    require(first == 0 && end == static_cast<int64_t>(bin_bytes),
            at + "its sequences lie at bytes " + std::to_string(first) + " to " +
                std::to_string(end) + " of '" + bin + "', which has " + std::to_string(bin_bytes) +
                ": the two files do not match");
  }
  return map_tokens(bin, 0, width, bin_bytes / width, -1, "");
}

}  // namespace mpitrain
