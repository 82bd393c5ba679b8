#include "mpitrain/data/document_starts.hpp"

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

DocumentBoundary document_boundary(const Tokenizer& tokenizer, const std::string& option) {
  if (const auto start = tokenizer.document_start()) return {static_cast<int32_t>(*start), true};
  if (const auto end = tokenizer.document_end()) return {static_cast<int32_t>(*end), false};
  throw UsageError("--" + option + ": the " + tokenizer.name() +
                   " tokenizer marks no document boundary (no token before or after each "
                   "document), so the documents of the data cannot be found");
}

std::string describe(const DocumentBoundary& boundary, const Tokenizer& tokenizer) {
  const std::string token =
      std::to_string(boundary.token) + " (" + tokenizer.decode(&boundary.token, 1) + ")";
  return boundary.before ? "a document starts at each token " + token
                         : "a document starts after each token " + token;
}

void document_starts(const int32_t* tokens, int rows, int T, const DocumentBoundary& boundary,
                     int32_t* starts) {
  for (int r = 0; r < rows; ++r) {
    const int32_t* x = tokens + static_cast<size_t>(r) * T;
    int32_t* row = starts + static_cast<size_t>(r) * T;
    for (int t = 0, start = 0; t < T; ++t) {
      const bool begins =
          boundary.before ? x[t] == boundary.token : t > 0 && x[t - 1] == boundary.token;
      if (begins) start = t;
      row[t] = start;
    }
  }
}

}  // namespace mpitrain
