// Private to src/data: one opener per token-file format (open_tokens picks one).
// Each expects an existing, readable regular file and validates the content (UsageError).
#pragma once

#include <memory>
#include <string>

#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

std::unique_ptr<TokenSource> open_hdf5_tokens(const std::string& path);
std::unique_ptr<TokenSource> open_llmc_tokens(const std::string& path);
std::unique_ptr<TokenSource> open_nanogpt_tokens(const std::string& path);

// llm.c shard magics.
inline constexpr int32_t kLlmcMagicU16 = 20240520;  // version 1, uint16 tokens
inline constexpr int32_t kLlmcMagicU32 = 20240801;  // version 7, uint32 tokens
inline constexpr int32_t kLlmcHeaderInts = 256;

}  // namespace mpitrain
