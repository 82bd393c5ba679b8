// Pieces tokenized by a pool of threads, each taking the next untaken piece.
#include "mpitrain/data/tokenize_documents.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace mpitrain {

std::vector<PieceTokens> tokenize_pieces(const Tokenizer& tok, const std::vector<TextPiece>& pieces,
                                         int threads) {
  std::vector<PieceTokens> tokens(pieces.size());
  const bool marked = tok.document_start() || tok.document_end();
  const std::vector<uint32_t> separator = marked ? std::vector<uint32_t>{} : tok.encode("\n");
  std::atomic<size_t> next{0};
  std::mutex error_mutex;
  std::exception_ptr error;  // that of the first piece that failed, as a serial run would
  size_t error_at = pieces.size();
  const auto work = [&] {
    for (size_t i = next++; i < pieces.size(); i = next++) {
      try {
        std::vector<uint32_t>& out = tokens[i].tokens;
        const PieceStart start = pieces[i].start;
        if (start != PieceStart::Continued && tok.document_start())
          out.push_back(*tok.document_start());
        else if (start == PieceStart::Document)
          out = separator;
        const std::vector<uint32_t> prompt = tok.encode(pieces[i].prompt);
        out.insert(out.end(), prompt.begin(), prompt.end());
        tokens[i].unscored = out.size();
        const std::vector<uint32_t> body = tok.encode(pieces[i].text);
        out.insert(out.end(), body.begin(), body.end());
        if (pieces[i].ends_document && tok.document_end()) out.push_back(*tok.document_end());
      } catch (...) {
        const std::lock_guard lock(error_mutex);
        if (i < error_at) {
          error = std::current_exception();
          error_at = i;
        }
      }
    }
  };
  const size_t n = std::min<size_t>(std::max(threads, 1), pieces.size());
  std::vector<std::jthread> pool;
  for (size_t t = 1; t < n; ++t) pool.emplace_back(work);
  work();
  pool.clear();  // joins
  if (error) std::rethrow_exception(error);
  return tokens;
}

}  // namespace mpitrain
