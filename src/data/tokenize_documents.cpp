// Pieces tokenized by a pool of threads, each taking the next untaken piece.
#include "mpitrain/data/tokenize_documents.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

std::vector<PieceTokens> tokenize_pieces(const Tokenizer& tok, const std::vector<TextPiece>& pieces,
                                         int threads, const ChatFormat* chat) {
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
        if (pieces[i].conversation) {
          require(chat != nullptr, pieces[i].source + ": a conversation, and no chat template");
          ChatTokens c = encode_conversation(
              tok, *chat, nlohmann::ordered_json::parse(pieces[i].text), pieces[i].source);
          tokens[i] = {std::move(c.tokens), std::move(c.scored), c.marked};
          continue;
        }
        std::vector<uint32_t>& out = tokens[i].tokens;
        const PieceStart start = pieces[i].start;
        if (start != PieceStart::Continued && tok.document_start())
          out.push_back(*tok.document_start());
        else if (start == PieceStart::Document)
          out = separator;
        const std::vector<uint32_t> prompt = tok.encode(pieces[i].prompt);
        out.insert(out.end(), prompt.begin(), prompt.end());
        const size_t unscored = out.size();
        const std::vector<uint32_t> body = tok.encode(pieces[i].text);
        out.insert(out.end(), body.begin(), body.end());
        if (pieces[i].ends_document && tok.document_end()) out.push_back(*tok.document_end());
        tokens[i].scored.assign(out.size(), 1);
        std::fill_n(tokens[i].scored.begin(), unscored, uint8_t{0});
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
