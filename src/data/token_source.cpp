#include "mpitrain/data/token_source.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <type_traits>
#include <vector>

#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/runtime/error.hpp"
#include "token_source_formats.hpp"

namespace mpitrain {

namespace {

// UsageError unless path is an existing regular file we can read.
void require_readable_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  require(std::filesystem::exists(status), "token file '" + path + "' does not exist");
  require(std::filesystem::is_regular_file(status),
          "token file '" + path + "' is not a regular file");
  std::ifstream in(path, std::ios::binary);
  require(in.good(), "cannot read token file '" + path + "': " + std::strerror(errno));
}

// UsageError if prepare-data was stopped between renaming this file and its partner.
void require_not_half_replaced(const std::string& path) {
  const std::filesystem::path file(path);
  const std::filesystem::path marker = file.parent_path() / kPairReplacingMarker;
  std::ifstream in(marker);
  for (std::string name; std::getline(in, name);)
    require(name != file.filename().string(),
            "token file '" + path + "' may not match its partner: prepare-data was stopped while " +
                "it replaced them (" + marker.string() + " is left); run prepare-data again");
}

// The first int32 of the file (an llm.c magic?), or 0 if the file is shorter than that.
int32_t first_int32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  int32_t magic = 0;
  if (!in.read(reinterpret_cast<char*>(&magic), sizeof magic)) return 0;
  return magic;
}

// Is path a Megatron dataset: X.bin beside a Megatron X.idx, or X.idx itself? UsageError for an
// X.bin beside an X.idx of another kind (fairseq's or older Megatron's "TNTIDX" index, whose .bin
// holds other element types): read as raw uint16 it would train on garbage.
bool is_megatron(const std::filesystem::path& path) {
  if (path.extension() == ".idx") return is_megatron_index(path.string());
  if (path.extension() != ".bin") return false;
  const std::string bin = path.string();
  const std::string idx = bin.substr(0, bin.size() - 4) + ".idx";
  std::error_code ec;
  if (!std::filesystem::exists(idx, ec)) return false;
  require(is_megatron_index(idx),
          "'" + bin + "' lies beside an index '" + idx +
              "' that is not Megatron's (no MMIDIDX header; an older indexed dataset's .bin "
              "holds other element types): convert it, or give --data-format nanogpt if the "
              ".bin is raw uint16 tokens");
  return true;
}

std::unique_ptr<TokenSource> detect_and_open(const std::string& path) {
  if (is_hdf5_file(path)) return open_hdf5_tokens(path);
  const int32_t magic = first_int32(path);
  if (magic == kLlmcMagicU16 || magic == kLlmcMagicU32) return open_llmc_tokens(path);
  if (is_megatron(path)) return open_megatron_tokens(path);
  const auto bytes = std::filesystem::file_size(path);
  if (path.ends_with(".bin") && bytes % 2 == 0) return open_nanogpt_tokens(path);
  throw UsageError("'" + path + "' is not a token file; tried HDF5 (no HDF5 signature), llm.c " +
                   "shard (first int32 is " + std::to_string(magic) + ", not " +
                   std::to_string(kLlmcMagicU16) + " or " + std::to_string(kLlmcMagicU32) +
                   "), nanoGPT raw uint16 (needs a name ending in .bin and an even size; " +
                   "this file has " + std::to_string(bytes) + " bytes)");
}

}  // namespace

TokenFormat parse_token_format(const std::string& name) {
  if (name == "auto") return TokenFormat::Auto;
  if (name == "hdf5") return TokenFormat::Hdf5;
  if (name == "llmc") return TokenFormat::Llmc;
  if (name == "nanogpt") return TokenFormat::NanoGpt;
  if (name == "megatron") return TokenFormat::Megatron;
  throw UsageError("unknown token format '" + name +
                   "' (expected auto, hdf5, llmc, nanogpt or megatron)");
}

std::unique_ptr<TokenSource> open_tokens(const std::string& path, TokenFormat format) {
  std::error_code ec;
  const bool prefix = !std::filesystem::exists(path, ec) &&
                      std::filesystem::exists(path + ".bin", ec) &&
                      std::filesystem::exists(path + ".idx", ec);
  if (format == TokenFormat::Megatron || (format == TokenFormat::Auto && prefix))
    return open_megatron_tokens(path);  // a Megatron prefix names no file itself
  require_readable_file(path);
  require_not_half_replaced(path);
  switch (format) {
    case TokenFormat::Hdf5:
      return open_hdf5_tokens(path);
    case TokenFormat::Llmc:
      return open_llmc_tokens(path);
    case TokenFormat::NanoGpt:
      return open_nanogpt_tokens(path);
    case TokenFormat::Megatron:
    case TokenFormat::Auto:
      break;
  }
  return detect_and_open(path);
}

void TokenSource::read_loss_mask(uint64_t, uint64_t, uint8_t*) const {
  MPITRAIN_THROW("'" + path() + "' has no loss mask");
}

namespace {

// The largest value that read(begin .. end) gives, as unsigned (a uint32 token above INT32_MAX
// reads as negative), read in chunks of a few MiB.
template <typename T, typename Read>
std::make_unsigned_t<T> max_in_chunks(uint64_t begin, uint64_t end, const std::string& what,
                                      const TokenSource& src, Read read) {
  if (begin > end || end > src.size())
    MPITRAIN_THROW(what + ": range [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") is outside '" + src.path() + "' (" + std::to_string(src.size()) + " tokens)");
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::vector<T> buf(std::min(kChunk, end - begin));
  std::make_unsigned_t<T> best = 0;
  for (uint64_t pos = begin; pos < end; pos += kChunk) {
    const uint64_t n = std::min(kChunk, end - pos);
    read(pos, n, buf.data());
    for (uint64_t i = 0; i < n; ++i)
      best = std::max(best, static_cast<std::make_unsigned_t<T>>(buf[i]));
  }
  return best;
}

}  // namespace

uint32_t max_token(const TokenSource& src, uint64_t begin, uint64_t end) {
  return max_in_chunks<int32_t>(
      begin, end, "max_token", src,
      [&](uint64_t at, uint64_t n, int32_t* out) { src.read(at, n, out); });
}

uint8_t max_loss_mask(const TokenSource& src, uint64_t begin, uint64_t end) {
  return max_in_chunks<uint8_t>(
      begin, end, "max_loss_mask", src,
      [&](uint64_t at, uint64_t n, uint8_t* out) { src.read_loss_mask(at, n, out); });
}

}  // namespace mpitrain
