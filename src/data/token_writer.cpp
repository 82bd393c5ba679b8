#include "mpitrain/data/token_writer.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include "mpitrain/io/hdf5.hpp"
#include "mpitrain/runtime/error.hpp"
#include "token_source_formats.hpp"

namespace mpitrain {

namespace {

// Error unless every token is below `limit`.
void check_below(const std::vector<uint32_t>& tokens, uint64_t limit, const std::string& path,
                 const std::string& why) {
  const auto it =
      std::find_if(tokens.begin(), tokens.end(), [&](uint32_t t) { return t >= limit; });
  if (it != tokens.end())
    MPITRAIN_THROW("cannot write '" + path + "': token " + std::to_string(*it) + " at position " +
                   std::to_string(it - tokens.begin()) + " is >= " + std::to_string(limit) + " (" +
                   why + ")");
}

// Writes `header` bytes then the tokens (element size: sizeof *tokens) to a new file at path.
template <typename T>
void write_token_file(const std::string& path, const void* header, size_t header_bytes,
                      const std::vector<T>& tokens) {
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!file) MPITRAIN_THROW("cannot create '" + path + "': " + std::strerror(errno));
  bool ok = header_bytes == 0 || std::fwrite(header, 1, header_bytes, file.get()) == header_bytes;
  ok = ok && std::fwrite(tokens.data(), sizeof(T), tokens.size(), file.get()) == tokens.size();
  ok = std::fclose(file.release()) == 0 && ok;
  if (!ok) MPITRAIN_THROW("cannot write '" + path + "': " + std::strerror(errno));
}

// Writes `header` bytes then the tokens as uint16 to a new file at path.
void write_u16_file(const std::string& path, const void* header, size_t header_bytes,
                    const std::vector<uint32_t>& tokens) {
  check_below(tokens, 65536, path, "the format stores uint16");
  write_token_file(path, header, header_bytes, std::vector<uint16_t>(tokens.begin(), tokens.end()));
}

// An llm.c header for tokens.size() tokens; Error if they do not fit its int32 count.
std::array<int32_t, kLlmcHeaderInts> llmc_header(const std::string& path, int32_t magic,
                                                 int32_t version,
                                                 const std::vector<uint32_t>& tokens) {
  if (tokens.size() > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    MPITRAIN_THROW("cannot write '" + path + "': " + std::to_string(tokens.size()) +
                   " tokens do not fit an llm.c shard's int32 count");
  std::array<int32_t, kLlmcHeaderInts> header{};
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(tokens.size());
  return header;
}

}  // namespace

void write_tokens_hdf5(const std::string& path, const std::vector<uint32_t>& tokens,
                       int64_t vocab_size, const std::string& tokenizer) {
  if (vocab_size <= 0)
    MPITRAIN_THROW("write_tokens_hdf5: vocab_size " + std::to_string(vocab_size));
  check_below(tokens, static_cast<uint64_t>(vocab_size), path, "the vocabulary size");
  const hid_t file_type = vocab_size <= 65536 ? H5T_STD_U16LE : H5T_STD_U32LE;
  H5Handle file = create_file(path);
  H5Handle dset = create_dataset_1d(file.get(), "tokens", file_type, tokens.size());
  write_1d(dset.get(), H5T_NATIVE_UINT32, 0, tokens.size(), tokens.data());
  write_attribute_int(dset.get(), "vocab_size", vocab_size);
  write_attribute_string(dset.get(), "tokenizer", tokenizer);
  dset.close();
  file.close();
}

void write_llmc_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  const auto header = llmc_header(path, kLlmcMagicU16, 1, tokens);
  write_u16_file(path, header.data(), sizeof header, tokens);
}

void write_llmc_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens) {
  const auto header = llmc_header(path, kLlmcMagicU32, 7, tokens);
  write_token_file(path, header.data(), sizeof header, tokens);
}

void write_nanogpt_bin(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_u16_file(path, nullptr, 0, tokens);
}

}  // namespace mpitrain
