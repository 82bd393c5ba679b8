#include "mpitrain/data/token_spool.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {
constexpr size_t kReadBlockTokens = size_t{1} << 20;
}

TokenSpool::TokenSpool(std::string path, int64_t vocab_size)
    : path_(std::move(path)), width_(vocab_size <= 65536 ? 2 : 4) {
  file_.reset(std::fopen(path_.c_str(), "w+b"));
  if (!file_) MPITRAIN_THROW("cannot create '" + path_ + "': " + std::strerror(errno));
}

TokenSpool::~TokenSpool() {
  file_.reset();
  std::error_code ec;
  std::filesystem::remove(path_, ec);
}

void TokenSpool::append(const std::vector<uint32_t>& tokens) {
  bool ok = true;
  if (width_ == 2) {
    const std::vector<uint16_t> narrow(tokens.begin(), tokens.end());
    ok = std::fwrite(narrow.data(), 2, narrow.size(), file_.get()) == narrow.size();
  } else {
    ok = std::fwrite(tokens.data(), 4, tokens.size(), file_.get()) == tokens.size();
  }
  if (!ok) MPITRAIN_THROW("cannot write '" + path_ + "': " + std::strerror(errno));
  size_ += tokens.size();
}

void TokenSpool::read(uint64_t begin, uint64_t end,
                      const std::function<void(const uint32_t* tokens, size_t n)>& sink) {
  if (std::fflush(file_.get()) != 0 ||
      fseeko(file_.get(), static_cast<off_t>(begin * width_), SEEK_SET) != 0)
    MPITRAIN_THROW("cannot read '" + path_ + "': " + std::strerror(errno));
  std::vector<uint32_t> block;
  std::vector<uint16_t> narrow;
  for (uint64_t at = begin; at < end;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kReadBlockTokens, end - at));
    bool ok = true;
    if (width_ == 2) {
      narrow.resize(n);
      ok = std::fread(narrow.data(), 2, n, file_.get()) == n;
      block.assign(narrow.begin(), narrow.end());
    } else {
      block.resize(n);
      ok = std::fread(block.data(), 4, n, file_.get()) == n;
    }
    if (!ok) MPITRAIN_THROW("cannot read '" + path_ + "': " + std::strerror(errno));
    sink(block.data(), n);
    at += n;
  }
  if (fseeko(file_.get(), 0, SEEK_END) != 0)  // appends go on at the end
    MPITRAIN_THROW("cannot seek '" + path_ + "': " + std::strerror(errno));
}

}  // namespace mpitrain
