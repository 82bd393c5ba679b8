#include "mpitrain/data/token_spool.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr size_t kReadBlockTokens = size_t{1} << 20;

// Seeks f (path) to byte `at` (SEEK_SET) or its end (SEEK_END).
void seek(FILE* f, off_t at, int whence, const std::string& path) {
  if (std::fflush(f) != 0 || fseeko(f, at, whence) != 0)
    MPITRAIN_THROW("cannot seek '" + path + "': " + std::strerror(errno));
}

}  // namespace

TokenSpool::TokenSpool(std::string path, int64_t vocab_size, bool loss_mask)
    : path_(std::move(path)), width_(vocab_size <= 65536 ? 2 : 4) {
  file_.reset(std::fopen(path_.c_str(), "w+b"));
  if (!file_) MPITRAIN_THROW("cannot create '" + path_ + "': " + std::strerror(errno));
  if (!loss_mask) return;
  mask_.reset(std::fopen((path_ + ".mask").c_str(), "w+b"));
  if (!mask_) MPITRAIN_THROW("cannot create '" + path_ + ".mask': " + std::strerror(errno));
}

TokenSpool::~TokenSpool() {
  file_.reset();
  std::error_code ec;
  std::filesystem::remove(path_, ec);
  if (!mask_) return;
  mask_.reset();
  std::filesystem::remove(path_ + ".mask", ec);
}

void TokenSpool::append(const std::vector<uint32_t>& tokens, const std::vector<uint8_t>& scored) {
  if (mask_) {
    if (scored.size() != tokens.size())
      MPITRAIN_THROW("a loss mask of " + std::to_string(scored.size()) + " bytes for " +
                     std::to_string(tokens.size()) + " tokens");
    if (std::fwrite(scored.data(), 1, scored.size(), mask_.get()) != scored.size())
      MPITRAIN_THROW("cannot write '" + path_ + ".mask': " + std::strerror(errno));
  }
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

void TokenSpool::read(
    uint64_t begin, uint64_t end,
    const std::function<void(const uint32_t* tokens, const uint8_t* scored, size_t n)>& sink) {
  seek(file_.get(), static_cast<off_t>(begin * width_), SEEK_SET, path_);
  if (mask_) seek(mask_.get(), static_cast<off_t>(begin), SEEK_SET, path_ + ".mask");
  std::vector<uint32_t> block;
  std::vector<uint16_t> narrow;
  std::vector<uint8_t> scored;
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
    if (mask_) {
      scored.resize(n);
      if (std::fread(scored.data(), 1, n, mask_.get()) != n)
        MPITRAIN_THROW("cannot read '" + path_ + ".mask': " + std::strerror(errno));
    }
    sink(block.data(), mask_ ? scored.data() : nullptr, n);
    at += n;
  }
  seek(file_.get(), 0, SEEK_END, path_);  // appends go on at the end
  if (mask_) seek(mask_.get(), 0, SEEK_END, path_ + ".mask");
}

}  // namespace mpitrain
