// Tokenizing a corpus's pieces (prepare-data's input), several at a time.
#pragma once

#include <vector>

#include "mpitrain/data/corpus_reader.hpp"
#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

// A piece's tokens, and how many of them come before its text: the document's start (or the
// separator) and its prompt, which a loss mask does not score as targets.
struct PieceTokens {
  std::vector<uint32_t> tokens;
  size_t unscored = 0;
  bool operator==(const PieceTokens&) const = default;
};

// The tokens of each piece: tok.document_start() before each one that starts a document and
// tok.document_end() after each one that ends a document, or, for a tokenizer with neither, the
// tokens of "\n" before each one that starts a document after the first. A piece with a prompt
// (TextPiece::prompt) has the prompt's tokens after the start, encoded apart from the text's (so
// the text's first token starts at its first byte): those and the start are its unscored ones
// (a document's start is never scored, since its prediction comes from the previous document).
// `threads` workers take whole pieces, so the result is the same for any thread count. The error
// of the first piece that fails is rethrown here.
std::vector<PieceTokens> tokenize_pieces(const Tokenizer& tok, const std::vector<TextPiece>& pieces,
                                         int threads);

}  // namespace mpitrain
