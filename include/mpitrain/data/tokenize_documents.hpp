// Tokenizing a corpus of documents (prepare-data's input files), several at a time.
#pragma once

#include <string>
#include <vector>

#include "mpitrain/data/tokenizer.hpp"

namespace mpitrain {

// The tokens of each document: tok.document_start() before each one and tok.document_end() after
// it, or, for a tokenizer with neither, the tokens of "\n" between documents. `threads` workers
// take whole documents, so the result is the same for any thread count. The error of the first
// document that fails is rethrown here.
std::vector<std::vector<uint32_t>> tokenize_documents(const Tokenizer& tok,
                                                      const std::vector<std::string>& documents,
                                                      int threads);

}  // namespace mpitrain
