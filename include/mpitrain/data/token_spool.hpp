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
// back in ranges; removed with the spool. Error with the system's reason when a write fails.
class TokenSpool {
 public:
  TokenSpool(std::string path, int64_t vocab_size);
  ~TokenSpool();
  TokenSpool(const TokenSpool&) = delete;
  TokenSpool& operator=(const TokenSpool&) = delete;

  void append(const std::vector<uint32_t>& tokens);
  uint64_t size() const { return size_; }
  // Calls sink(tokens, n) on tokens [begin, end) in order, in blocks of at most 1 Mi tokens.
  void read(uint64_t begin, uint64_t end,
            const std::function<void(const uint32_t* tokens, size_t n)>& sink);

 private:
  std::string path_;
  size_t width_;  // bytes per token: 2 or 4
  std::unique_ptr<FILE, int (*)(FILE*)> file_{nullptr, std::fclose};
  uint64_t size_ = 0;
};

}  // namespace mpitrain
