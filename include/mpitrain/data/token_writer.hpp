// Writers for the three token-file formats that TokenSource reads (see token_source.hpp).
// Each replaces an existing file. A token that the format cannot hold is an Error.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/io/hdf5.hpp"

namespace mpitrain {

// How a token file stores its tokens.
enum class TokenFileKind {
  Hdf5,     // dataset /tokens, uint16 if vocab_size <= 65536 else uint32, contiguous, uncompressed,
            // attributes vocab_size and tokenizer on /tokens; a loss mask: /loss_mask, uint8
  LlmcU16,  // llm.c shard, magic 20240520 version 1, uint16
  LlmcU32,  // llm.c shard, magic 20240801 version 7, uint32 (vocabularies beyond uint16)
  NanoGpt,  // raw uint16, no header
};

// A token file of a known token count written block by block, in bounded memory: append() the
// tokens in order, then finish(). Every token must be < vocab_size and fit the kind's element;
// Error (naming the file and the token's position) if one does not, or if the count differs.
// With loss_mask (HDF5 only: Error for another kind), every append gives each token's mask byte
// too (1: scored as a target, 0: not; token_source.hpp).
class TokenFileWriter {
 public:
  TokenFileWriter(const std::string& path, TokenFileKind kind, uint64_t count, int64_t vocab_size,
                  const std::string& tokenizer, bool loss_mask = false);
  ~TokenFileWriter();
  TokenFileWriter(const TokenFileWriter&) = delete;
  TokenFileWriter& operator=(const TokenFileWriter&) = delete;

  void append(const uint32_t* tokens, size_t n, const uint8_t* scored = nullptr);
  // Records that the boundary token does not mark the documents (token_source.hpp; HDF5 only).
  void mark_documents_unmarked();
  void finish();  // closes the file (Error if fewer than `count` tokens were appended)

 private:
  std::string path_;
  TokenFileKind kind_;
  uint64_t count_, written_ = 0;
  bool loss_mask_;
  uint64_t limit_;                                                   // every token is below it
  std::unique_ptr<FILE, int (*)(FILE*)> bin_{nullptr, std::fclose};  // the .bin kinds
  H5Handle h5_file_, h5_tokens_, h5_mask_;                           // Hdf5
};

// The whole of `tokens` to one file of each kind.
// HDF5: every token must be < vocab_size; a loss mask, where given, has a byte per token.
void write_tokens_hdf5(const std::string& path, const std::vector<uint32_t>& tokens,
                       int64_t vocab_size, const std::string& tokenizer,
                       const std::vector<uint8_t>* loss_mask = nullptr);

// llm.c shard, magic 20240520 version 1 (uint16); tokens must be <= 65535.
void write_llmc_shard(const std::string& path, const std::vector<uint32_t>& tokens);

// llm.c shard, magic 20240801 version 7 (uint32): for vocabularies beyond uint16.
void write_llmc_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens);

// nanoGPT raw uint16, no header; tokens must be <= 65535.
void write_nanogpt_bin(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace mpitrain
