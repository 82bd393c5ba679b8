// Writers for the three token-file formats that TokenSource reads (see token_source.hpp).
// Each replaces an existing file. A token that the format cannot hold is an Error.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpitrain {

// HDF5: dataset /tokens, uint16 if vocab_size <= 65536 else uint32 (contiguous, uncompressed),
// attributes vocab_size and tokenizer on /tokens. Every token must be < vocab_size.
void write_tokens_hdf5(const std::string& path, const std::vector<uint32_t>& tokens,
                       int64_t vocab_size, const std::string& tokenizer);

// llm.c shard, magic 20240520 version 1 (uint16); tokens must be <= 65535.
void write_llmc_shard(const std::string& path, const std::vector<uint32_t>& tokens);

// llm.c shard, magic 20240801 version 7 (uint32): for vocabularies beyond uint16.
void write_llmc_shard_u32(const std::string& path, const std::vector<uint32_t>& tokens);

// nanoGPT raw uint16, no header; tokens must be <= 65535.
void write_nanogpt_bin(const std::string& path, const std::vector<uint32_t>& tokens);

}  // namespace mpitrain
