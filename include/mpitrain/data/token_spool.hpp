// Tokens held on disk between tokenizing and writing the final token files (prepare-data), so
// that a corpus of any size needs memory for one block only.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mpitrain {

// A raw file of tokens, uint16 when vocab_size <= 65536 else uint32, appended in order and read
// back in ranges; removed with the spool. With a loss mask, a second raw file (path + ".mask")
// holds a byte per token: 1 scored as a target, 0 not. Error with the system's reason when a
// write fails.
class TokenSpool {
 public:
  TokenSpool(std::string path, int64_t vocab_size, bool loss_mask = false);
  ~TokenSpool();
  TokenSpool(const TokenSpool&) = delete;
  TokenSpool& operator=(const TokenSpool&) = delete;

  // With a loss mask, `scored` (a byte per token) is its part; without, it is not read.
  void append(const std::vector<uint32_t>& tokens, const std::vector<uint8_t>& scored = {});
  uint64_t size() const { return size_; }
  // Calls sink(tokens, scored, n) on tokens [begin, end) in order, in blocks of at most 1 Mi
  // tokens; scored: their mask bytes, or null without a loss mask.
  void read(
      uint64_t begin, uint64_t end,
      const std::function<void(const uint32_t* tokens, const uint8_t* scored, size_t n)>& sink);

 private:
  using File = std::unique_ptr<FILE, int (*)(FILE*)>;
  std::string path_;
  size_t width_;  // bytes per token: 2 or 4
  File file_{nullptr, std::fclose};
  File mask_{nullptr, std::fclose};  // with a loss mask
  uint64_t size_ = 0;
};

}  // namespace mpitrain
