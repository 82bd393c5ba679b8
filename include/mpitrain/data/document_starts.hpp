// Document masking (--document-mask): where each token's document begins in a packed sequence.
//
// prepare-data packs documents end to end, marked by the tokenizer's boundary token: GPT-2's
// <|endoftext|> or a BOS before each document, a Hugging Face eos_token after it. With document
// masking a token attends to no position before the first token of its document (Megatron's
// reset_attention_mask, torchtitan's block_causal mask; backend.hpp's AttentionMask). Positions
// run on through the window (under RoPE a document's scores depend on relative positions only,
// so it trains as it would alone), or with --document-positions count from each document's
// first token (Megatron's reset_position_ids: a gpt2's learned positions; ModelOptions).
//   tokens  <eot> a b c <eot> d e     (the boundary before: a document starts at the token)
//   starts    0   0 0 0   4   4 4
//   tokens  a b </s> c d </s> e       (the boundary after: a document starts after the token)
//   starts  0 0  0   3 3  3   6
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

struct DocumentBoundary {
  int32_t token = 0;
  bool before = true;  // the token starts a document (true) or ends one (false)
};

// The boundary of a tokenizer's documents: its document_start token if it has one, else its
// document_end; UsageError naming `option` for a tokenizer with neither (bytes, whose documents
// prepare-data separates with '\n', a byte documents also hold).
DocumentBoundary document_boundary(const Tokenizer& tokenizer, const std::string& option);
// "a document starts at each token 50256 (<|endoftext|>)": for the start-up lines.
std::string describe(const DocumentBoundary& boundary, const Tokenizer& tokenizer);

// For each of `rows` sequences of T tokens (rows, T): starts[r, t] = the first position of token
// (r, t)'s document in its sequence, the boundary's last document start at or before t, 0 if none.
void document_starts(const int32_t* tokens, int rows, int T, const DocumentBoundary& boundary,
                     int32_t* starts);

}  // namespace mpitrain
