// Loss masking at document boundaries (--mask-boundary-loss, Megatron's --eod-mask-loss): no loss
// where the input token is the tokenizer's document boundary (data/document_starts.hpp), whose
// next token is the first of a document. After an end token (a Qwen tokenizer's EOS) that
// prediction crosses into the next document, which a document mask hides from it; after a start
// token (GPT-2's <|endoftext|>, a BOS) it is the document's first token guessed from nothing.
//   tokens   a  b  </s> c  d  </s>        <eot> a  b  <eot> c
//   targets  b </s> c   d </s> e     ->   a     b <eot> c   d
//   scored   y  y   -   y  y   -          -     y  y    -   y
// The trainer's loss is the mean over the scored targets of the whole step (every rank's and
// micro-batch's: Megatron-Core's per-token loss), so every layout trains the same objective; the
// count is summed over the ranks before the first forward, so backward takes that mean's
// gradient at once (Model's LossWeights), and the MoE losses keep their weight per token.
// A token file's own loss mask (fine-tuning's prompts: /loss_mask, data/token_source.hpp) makes
// its targets kUnscored as SampleWindows reads them, and the trainer takes that mean alike.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mpitrain/backend/unscored.hpp"

namespace mpitrain {

// targets[i] = kUnscored where tokens[i] is `boundary`, for i < n.
void unscore_after_boundary(int32_t boundary, const int32_t* tokens, int32_t* targets, size_t n);

// How many of the n targets are scored (not kUnscored).
size_t scored_targets(const int32_t* targets, size_t n);

}  // namespace mpitrain
