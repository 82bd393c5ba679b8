#include "mpitrain/data/token_writer.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "mpitrain/runtime/error.hpp"
#include "token_source_formats.hpp"

namespace mpitrain {

namespace {

bool stores_u16(TokenFileKind kind, int64_t vocab_size) {
  return kind == TokenFileKind::LlmcU16 || kind == TokenFileKind::NanoGpt ||
         (kind == TokenFileKind::Hdf5 && vocab_size <= 65536);
}

// Why a token must be below the limit (for the error message).
const char* limit_reason(TokenFileKind kind) {
  return kind == TokenFileKind::Hdf5 ? "the vocabulary size" : "the format stores uint16";
}

}  // namespace

TokenFileWriter::TokenFileWriter(const std::string& path, TokenFileKind kind, uint64_t count,
                                 int64_t vocab_size, const std::string& tokenizer, bool loss_mask)
    : path_(path), kind_(kind), count_(count), loss_mask_(loss_mask) {
  if (vocab_size <= 0) MPITRAIN_THROW("TokenFileWriter: vocab_size " + std::to_string(vocab_size));
  if (loss_mask && kind != TokenFileKind::Hdf5)
    MPITRAIN_THROW("cannot write '" + path + "': only an HDF5 token file holds a loss mask");
  limit_ = kind == TokenFileKind::Hdf5    ? static_cast<uint64_t>(vocab_size)
           : stores_u16(kind, vocab_size) ? 65536
                                          : uint64_t{1} << 32;
  if (kind == TokenFileKind::Hdf5) {
    h5_file_ = create_file(path);
    h5_tokens_ =
        create_dataset_1d(h5_file_.get(), "tokens",
                          stores_u16(kind, vocab_size) ? H5T_STD_U16LE : H5T_STD_U32LE, count);
    write_attribute_int(h5_tokens_.get(), "vocab_size", vocab_size);
    write_attribute_string(h5_tokens_.get(), "tokenizer", tokenizer);
    if (loss_mask) h5_mask_ = create_dataset_1d(h5_file_.get(), "loss_mask", H5T_STD_U8LE, count);
    return;
  }
  bin_.reset(std::fopen(path.c_str(), "wb"));
  if (!bin_) MPITRAIN_THROW("cannot create '" + path + "': " + std::strerror(errno));
  if (kind == TokenFileKind::NanoGpt) return;
  if (count > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    MPITRAIN_THROW("cannot write '" + path + "': " + std::to_string(count) +
                   " tokens do not fit an llm.c shard's int32 count");
  std::array<int32_t, kLlmcHeaderInts> header{};
  header[0] = kind == TokenFileKind::LlmcU16 ? kLlmcMagicU16 : kLlmcMagicU32;
  header[1] = kind == TokenFileKind::LlmcU16 ? 1 : 7;
  header[2] = static_cast<int32_t>(count);
  if (std::fwrite(header.data(), sizeof header, 1, bin_.get()) != 1)
    MPITRAIN_THROW("cannot write '" + path + "': " + std::strerror(errno));
}

TokenFileWriter::~TokenFileWriter() = default;

void TokenFileWriter::mark_documents_unmarked() {
  if (kind_ != TokenFileKind::Hdf5)
    MPITRAIN_THROW("cannot write '" + path_ + "': only an HDF5 token file holds attributes");
  write_attribute_int(h5_tokens_.get(), kDocumentsUnmarked, 1);
}

void TokenFileWriter::append(const uint32_t* tokens, size_t n, const uint8_t* scored) {
  if ((scored != nullptr) != loss_mask_)
    MPITRAIN_THROW("cannot write '" + path_ + "': " +
                   (loss_mask_ ? "its loss mask was not given" : "it was created without a mask"));
  if (n > count_ - written_)
    MPITRAIN_THROW("cannot write '" + path_ + "': more than the " + std::to_string(count_) +
                   " tokens it was created for");
  if (n == 0) return;
  const uint32_t* bad = std::find_if(tokens, tokens + n, [&](uint32_t t) { return t >= limit_; });
  if (bad != tokens + n)
    MPITRAIN_THROW("cannot write '" + path_ + "': token " + std::to_string(*bad) + " at position " +
                   std::to_string(written_ + (bad - tokens)) + " is >= " + std::to_string(limit_) +
                   " (" + limit_reason(kind_) + ")");
  if (kind_ == TokenFileKind::Hdf5) {
    write_1d(h5_tokens_.get(), H5T_NATIVE_UINT32, written_, n, tokens);  // converts to the file's
    if (scored) write_1d(h5_mask_.get(), H5T_NATIVE_UINT8, written_, n, scored);
  } else if (limit_ == 65536) {
    const std::vector<uint16_t> narrow(tokens, tokens + n);
    if (std::fwrite(narrow.data(), sizeof(uint16_t), n, bin_.get()) != n)
      MPITRAIN_THROW("cannot write '" + path_ + "': " + std::strerror(errno));
  } else if (std::fwrite(tokens, sizeof(uint32_t), n, bin_.get()) != n) {
    MPITRAIN_THROW("cannot write '" + path_ + "': " + std::strerror(errno));
  }
  written_ += n;
}

void TokenFileWriter::finish() {
  if (written_ != count_)
    MPITRAIN_THROW("cannot write '" + path_ + "': " + std::to_string(written_) + " of its " +
                   std::to_string(count_) + " tokens were given");
  if (kind_ == TokenFileKind::Hdf5) {
    if (loss_mask_) h5_mask_.close();
    h5_tokens_.close();
    h5_file_.close();
  } else if (std::fclose(bin_.release()) != 0) {
    MPITRAIN_THROW("cannot write '" + path_ + "': " + std::strerror(errno));
  }
}

namespace {

void write_whole(const std::string& path, TokenFileKind kind, const std::vector<uint32_t>& tokens,
                 int64_t vocab_size, const std::string& tokenizer,
                 const std::vector<uint8_t>* loss_mask = nullptr) {
  if (loss_mask && loss_mask->size() != tokens.size())
    MPITRAIN_THROW("cannot write '" + path + "': " + std::to_string(loss_mask->size()) +
                   " mask bytes for " + std::to_string(tokens.size()) + " tokens");
  TokenFileWriter writer(path, kind, tokens.size(), vocab_size, tokenizer, loss_mask != nullptr);
  writer.append(tokens.data(), tokens.size(), loss_mask ? loss_mask->data() : nullptr);
  writer.finish();
}

}  // namespace

void write_tokens_hdf5(const std::string& path, const std::vector<uint32_t>& tokens,
                       int64_t vocab_size, const std::string& tokenizer,
                       const std::vector<uint8_t>* loss_mask) {
  write_whole(path, TokenFileKind::Hdf5, tokens, vocab_size, tokenizer, loss_mask);
}

void write_llmc_shard(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_whole(path, TokenFileKind::LlmcU16, tokens, 65536, "");
}

void write_llmc_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_whole(path, TokenFileKind::LlmcU32, tokens, int64_t{1} << 32, "");
}

void write_nanogpt_bin(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_whole(path, TokenFileKind::NanoGpt, tokens, 65536, "");
}

}  // namespace mpitrain
