// Private to src/data: one opener per token-file format (open_tokens picks one).
// Each expects an existing, readable regular file and validates the content (UsageError).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

std::unique_ptr<TokenSource> open_hdf5_tokens(const std::string& path);
std::unique_ptr<TokenSource> open_llmc_tokens(const std::string& path);
std::unique_ptr<TokenSource> open_nanogpt_tokens(const std::string& path);
// Megatron-LM's PREFIX.bin + PREFIX.idx, named by either the .bin or the prefix.
std::unique_ptr<TokenSource> open_megatron_tokens(const std::string& path);
bool is_megatron_index(const std::string& idx_path);  // starts with Megatron's MMIDIDX header
// `count` little-endian tokens of `width` bytes (2 or 4) at byte `offset` of the file, and their
// loss mask's `count` bytes at byte `mask_offset` where given, read out of a read-only mapping
// (concurrent_reads), documents_unmarked as given; UsageError if the file is shorter than that.
std::unique_ptr<TokenSource> map_tokens(const std::string& path, uint64_t offset, int width,
                                        uint64_t count, int64_t vocab_size,
                                        const std::string& tokenizer,
                                        std::optional<uint64_t> mask_offset = std::nullopt,
                                        bool documents_unmarked = false);

// llm.c shard magics.
inline constexpr int32_t kLlmcMagicU16 = 20240520;  // version 1, uint16 tokens
inline constexpr int32_t kLlmcMagicU32 = 20240801;  // version 7, uint32 tokens
inline constexpr int32_t kLlmcHeaderInts = 256;

}  // namespace mpitrain
