// Tokenizing a corpus's pieces (prepare-data's input), several at a time.
#pragma once

#include <vector>

#include "mpitrain/data/chat_encoding.hpp"
#include "mpitrain/data/corpus_reader.hpp"
#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

// A piece's tokens, and a loss-mask byte for each: 0 for the document's start (or the separator)
// and its prompt, or a conversation's tokens outside the assistant's turns; 1 for the others.
struct PieceTokens {
  std::vector<uint32_t> tokens;
  std::vector<uint8_t> scored;
  bool marked = true;  // false for a conversation the boundary does not mark (ChatTokens)
  bool operator==(const PieceTokens&) const = default;
};

// The tokens of each piece: tok.document_start() before each one that starts a document and
// tok.document_end() after each one that ends a document, or, for a tokenizer with neither, the
// tokens of "\n" before each one that starts a document after the first. A piece with a prompt
// (TextPiece::prompt) has the prompt's tokens after the start, encoded apart from the text's (so
// the text's first token starts at its first byte): those and the start are its unscored ones
// (a document's start is never scored, since its prediction comes from the previous document).
// A conversation (TextPiece::conversation) is encode_conversation's tokens alone (the template
// writes its marks), which needs `chat`. `threads` workers take whole pieces, so the result is the
// same for any thread count. The error of the first piece that fails is rethrown here.
std::vector<PieceTokens> tokenize_pieces(const Tokenizer& tok, const std::vector<TextPiece>& pieces,
                                         int threads, const ChatFormat* chat = nullptr);

}  // namespace mpitrain
