// Token files read out of a read-only mapping: llm.c shards (int32[256] header + uint16/uint32
// tokens), nanoGPT raw uint16, and the raw data of a contiguous HDF5 /tokens (map_tokens). The file
// is mapped once; read() copies (and widens) out of the mapping.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>
#include <utility>

#include "mpitrain/runtime/error.hpp"
#include "token_source_formats.hpp"

namespace mpitrain {

static_assert(std::endian::native == std::endian::little,
              "llm.c and nanoGPT token files are little-endian; this host is not");

namespace {

class Fd {  // an open file descriptor, closed on destruction
 public:
  explicit Fd(const std::string& path) : fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    require(fd_ >= 0, "cannot open token file '" + path + "': " + std::strerror(errno));
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

class Mapping {  // a read-only mapping of a whole file (none for an empty file)
 public:
  Mapping(const Fd& fd, size_t bytes, const std::string& path) : bytes_(bytes) {
    if (bytes_ == 0) return;
    addr_ = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (addr_ == MAP_FAILED) MPITRAIN_THROW("mmap '" + path + "': " + std::strerror(errno));
  }
  ~Mapping() {
    if (addr_ != MAP_FAILED) ::munmap(addr_, bytes_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  const unsigned char* data() const { return static_cast<const unsigned char*>(addr_); }

 private:
  void* addr_ = MAP_FAILED;
  size_t bytes_;
};

uint64_t file_bytes(const Fd& fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) MPITRAIN_THROW("fstat '" + path + "': " + std::strerror(errno));
  return static_cast<uint64_t>(st.st_size);
}

class MappedTokenSource final : public TokenSource {
 public:
  // `count` tokens of `width` bytes (2 or 4) after `header` bytes of the file behind fd, and
  // their loss mask's `count` bytes at byte `mask` where the file has one.
  MappedTokenSource(std::string path, const Fd& fd, uint64_t bytes, uint64_t header, int width,
                    uint64_t count, int64_t vocab_size, std::string tokenizer,
                    std::optional<uint64_t> mask = std::nullopt)
      : path_(std::move(path)),
        map_(fd, bytes, path_),
        header_(header),
        width_(width),
        size_(count),
        vocab_size_(vocab_size),
        tokenizer_(std::move(tokenizer)),
        mask_(mask) {}

  uint64_t size() const override { return size_; }
  void read(uint64_t offset, uint64_t count, int32_t* out) const override {
    check_range(offset, count);
    if (count == 0) return;
    const unsigned char* src = map_.data() + header_ + offset * width_;
    if (width_ == 4) {
      std::memcpy(out, src, count * 4);
      return;
    }
    const auto* u16 = reinterpret_cast<const uint16_t*>(src);
    std::copy(u16, u16 + count, out);
  }
  int64_t vocab_size() const override { return vocab_size_; }
  std::string tokenizer() const override { return tokenizer_; }
  const std::string& path() const override { return path_; }
  bool concurrent_reads() const override { return true; }
  bool has_loss_mask() const override { return mask_.has_value(); }
  bool documents_unmarked() const override { return documents_unmarked_; }
  void set_documents_unmarked(bool unmarked) { documents_unmarked_ = unmarked; }
  void read_loss_mask(uint64_t offset, uint64_t count, uint8_t* out) const override {
    if (!mask_) TokenSource::read_loss_mask(offset, count, out);
    check_range(offset, count);
    if (count > 0) std::memcpy(out, map_.data() + *mask_ + offset, count);
  }

 private:
  void check_range(uint64_t offset, uint64_t count) const {
    if (offset > size_ || count > size_ - offset)
      MPITRAIN_THROW("'" + path_ + "': tokens [" + std::to_string(offset) + ", " +
                     std::to_string(offset + count) + ") are outside the file's " +
                     std::to_string(size_) + " tokens");
  }

  std::string path_;
  Mapping map_;
  uint64_t header_;  // bytes before the first token
  int width_;        // bytes per token
  uint64_t size_;    // tokens
  int64_t vocab_size_;
  std::string tokenizer_;
  std::optional<uint64_t> mask_;  // the loss mask's first byte in the file
  bool documents_unmarked_ = false;
};

}  // namespace

std::unique_ptr<TokenSource> open_llmc_tokens(const std::string& path) {
  Fd fd(path);
  const uint64_t bytes = file_bytes(fd, path);
  constexpr uint64_t kHeaderBytes = kLlmcHeaderInts * sizeof(int32_t);
  std::array<int32_t, kLlmcHeaderInts> header{};
  require(bytes >= kHeaderBytes, "'" + path + "' is truncated: " + std::to_string(bytes) +
                                     " bytes, shorter than an llm.c shard's 1024-byte header");
  if (::pread(fd.get(), header.data(), kHeaderBytes, 0) != static_cast<ssize_t>(kHeaderBytes))
    MPITRAIN_THROW("cannot read the header of '" + path + "': " + std::strerror(errno));
  const int32_t magic = header[0], version = header[1], count = header[2];
  require(magic == kLlmcMagicU16 || magic == kLlmcMagicU32,
          "'" + path + "' is not an llm.c token shard: magic " + std::to_string(magic) +
              ", expected " + std::to_string(kLlmcMagicU16) + " or " +
              std::to_string(kLlmcMagicU32));
  const int expected_version = magic == kLlmcMagicU16 ? 1 : 7;
  require(version == expected_version,
          "'" + path + "': llm.c shard version " + std::to_string(version) + " with magic " +
              std::to_string(magic) + "; expected version " + std::to_string(expected_version));
  require(count >= 0, "'" + path + "': llm.c header declares a negative token count (" +
                          std::to_string(count) + ")");
  const int width = magic == kLlmcMagicU16 ? 2 : 4;
  const uint64_t expected = kHeaderBytes + static_cast<uint64_t>(width) * count;
  require(bytes == expected, "'" + path + "' is truncated or corrupt: its llm.c header declares " +
                                 std::to_string(count) + " tokens (" + std::to_string(expected) +
                                 " bytes with the header), but the file has " +
                                 std::to_string(bytes) + " bytes");
  return std::make_unique<MappedTokenSource>(path, fd, bytes, kHeaderBytes, width, count, -1, "");
}

std::unique_ptr<TokenSource> open_nanogpt_tokens(const std::string& path) {
  Fd fd(path);
  const uint64_t bytes = file_bytes(fd, path);
  require(bytes % 2 == 0, "'" + path + "' has an odd size (" + std::to_string(bytes) +
                              " bytes); a nanoGPT .bin file holds uint16 tokens");
  return std::make_unique<MappedTokenSource>(path, fd, bytes, 0, 2, bytes / 2, -1, "");
}

std::unique_ptr<TokenSource> map_tokens(const std::string& path, uint64_t offset, int width,
                                        uint64_t count, int64_t vocab_size,
                                        const std::string& tokenizer,
                                        std::optional<uint64_t> mask_offset,
                                        bool documents_unmarked) {
  Fd fd(path);
  const uint64_t bytes = file_bytes(fd, path);
  require(offset <= bytes && count <= (bytes - offset) / width,
          "'" + path + "' is truncated: its " + std::to_string(count) + " tokens at byte " +
              std::to_string(offset) + " end past the file's " + std::to_string(bytes) + " bytes");
  require(!mask_offset || (*mask_offset <= bytes && count <= bytes - *mask_offset),
          "'" + path + "' is truncated: its loss mask's " + std::to_string(count) +
              " bytes at byte " + std::to_string(mask_offset.value_or(0)) +
              " end past the file's " + std::to_string(bytes) + " bytes");
  auto src = std::make_unique<MappedTokenSource>(path, fd, bytes, offset, width, count, vocab_size,
                                                 tokenizer, mask_offset);
  src->set_documents_unmarked(documents_unmarked);
  return src;
}

}  // namespace mpitrain
