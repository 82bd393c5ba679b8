// Tokenizing a corpus's pieces (prepare-data's input), several at a time.
#pragma once

#include <vector>

#include "mpitrain/data/corpus_reader.hpp"
#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

// The tokens of each piece: tok.document_start() before each one that starts a document and
// tok.document_end() after each one that ends a document, or, for a tokenizer with neither, the
// tokens of "\n" before each one that starts a document after the first. `threads` workers take
// whole pieces, so the result is the same for any thread count. The error of the first piece that
// fails is rethrown here.
std::vector<std::vector<uint32_t>> tokenize_pieces(const Tokenizer& tok,
                                                   const std::vector<TextPiece>& pieces,
                                                   int threads);

}  // namespace mpitrain
