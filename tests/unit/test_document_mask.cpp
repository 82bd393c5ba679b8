// Document masking (--document-mask): where documents start in packed tokens, and what the mask
// means for a model: under RoPE a packed document's losses and gradients are those it has alone.
// The boundary's loss mask (--mask-boundary-loss): which targets it leaves unscored.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/data/document_starts.hpp"
#include "mpitrain/data/loss_mask.hpp"
#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/rng.hpp"

namespace mpitrain {
namespace {

// rows sequences of tokens.size() / rows each
std::vector<int32_t> starts_of(const std::vector<int32_t>& tokens, DocumentBoundary boundary,
                               int rows = 1) {
  std::vector<int32_t> starts(tokens.size(), -1);
  document_starts(tokens.data(), rows, static_cast<int>(tokens.size()) / rows, boundary,
                  starts.data());
  return starts;
}

TEST(DocumentStarts, AtTheTokenBeforeOrAfterTheTokenAfter) {
  // GPT-2's <|endoftext|> (or a BOS) before each document: it is its document's first token
  EXPECT_EQ(starts_of({7, 1, 2, 7, 3, 7, 7}, {7, true}),
            (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 6}));
  EXPECT_EQ(starts_of({1, 2, 3}, {7, true}), (std::vector<int32_t>{0, 0, 0}));  // a window inside
  // an EOS after each document: the token after it starts the next
  EXPECT_EQ(starts_of({1, 2, 9, 3, 9, 9, 4}, {9, false}),
            (std::vector<int32_t>{0, 0, 0, 3, 3, 5, 6}));
  EXPECT_EQ(starts_of({9, 1, 2, 9}, {9, false}), (std::vector<int32_t>{0, 1, 1, 1}));
  // each sequence from its own position 0: a document does not run on into the next row
  EXPECT_EQ(starts_of({1, 7, 2, 3, 4, 7}, {7, true}, 2), (std::vector<int32_t>{0, 1, 1, 0, 0, 2}));
  EXPECT_EQ(starts_of({1, 9, 2, 3, 4, 9}, {9, false}, 2), (std::vector<int32_t>{0, 0, 2, 0, 0, 0}));
}

TEST(DocumentStarts, TheByteTokenizerMarksNoBoundaryAndIsRefused) {
  for (const std::string option : {"document-mask", "mask-boundary-loss"}) {
    try {
      document_boundary(ByteTokenizer(), option);
      FAIL() << "no refusal";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--" + option +
                                           ": the bytes tokenizer marks no document boundary"),
                std::string::npos)
          << e.what();
    }
  }
}

// --mask-boundary-loss: the targets whose input is the boundary are unscored, the header's
// examples (data/loss_mask.hpp), after an end token and after a start token.
TEST(LossMask, NoLossWhereTheInputIsTheBoundary) {
  const auto scored = [](std::vector<int32_t> tokens, int32_t boundary) {
    std::vector<int32_t> targets(tokens.begin() + 1, tokens.end());
    tokens.pop_back();
    unscore_after_boundary(boundary, tokens.data(), targets.data(), tokens.size());
    return std::make_pair(targets, scored_targets(targets.data(), targets.size()));
  };
  constexpr int32_t a = 1, b = 2, c = 3, d = 4, e = 5, eos = 9, eot = 7, x = kUnscored;
  EXPECT_EQ(scored({a, b, eos, c, d, eos, e}, eos),
            std::make_pair(std::vector<int32_t>{b, eos, x, d, eos, x}, size_t{4}));
  EXPECT_EQ(scored({eot, a, b, eot, c, d}, eot),
            std::make_pair(std::vector<int32_t>{x, b, eot, x, d}, size_t{3}));
  EXPECT_EQ(scored({a, b, c}, eos), std::make_pair(std::vector<int32_t>{b, c}, size_t{2}));
}

// A model over one packed sequence [document 0 | document 1] with document masking (starts
// given), against the same model over each document alone from position 0: the summed losses,
// the largest difference of a gradient relative to the largest gradient, and the packed loss
// without the mask.
struct Packing {
  double packed, alone, gradient_diff, unmasked;
};
Packing packed_and_alone(const ModelConfig& c, const ModelOptions& options) {
  CpuBackend<double> backend(1);
  const int n0 = 6, n1 = 9, T = n0 + n1;
  Model<double> model(c, backend, {}, 1, T, 1, nullptr, options);
  model.init(5);
  Rng rng(17, 0);
  for (size_t i = 0; i < model.num_params(); ++i)  // sharper attention than at initialisation
    model.params().full()[i] += 0.3 * rng.normal();
  std::vector<int32_t> tokens(T), targets(T), starts(T);
  for (int t = 0; t < T; ++t) {
    tokens[t] = static_cast<int32_t>(rng.below(c.vocab_size));
    targets[t] = static_cast<int32_t>(rng.below(c.vocab_size));
    starts[t] = t < n0 ? 0 : n0;
  }
  const auto gradients = [&] {
    return std::vector<double>(model.grads(), model.grads() + model.num_params());
  };
  Packing p{};
  model.zero_grads();
  p.packed = model.forward(0, tokens.data(), targets.data(), 1, T, 1.0, starts.data());
  model.backward(0, tokens.data(), 1, T, {}, starts.data());
  const std::vector<double> packed_grads = gradients();
  model.zero_grads();
  for (const auto& [t0, n] : {std::pair{0, n0}, std::pair{n0, n1}}) {
    p.alone += model.forward(0, tokens.data() + t0, targets.data() + t0, 1, n, 1.0);
    model.backward(0, tokens.data() + t0, 1, n);
  }
  const std::vector<double> alone_grads = gradients();
  double largest = 0;
  for (size_t i = 0; i < alone_grads.size(); ++i) {
    largest = std::max(largest, std::abs(alone_grads[i]));
    p.gradient_diff = std::max(p.gradient_diff, std::abs(packed_grads[i] - alone_grads[i]));
  }
  p.gradient_diff /= largest;
  p.unmasked = model.forward(0, tokens.data(), targets.data(), 1, T, 0.0);
  return p;
}

ModelConfig tiny(Arch arch) {
  ModelConfig c;
  c.set_arch(arch);
  c.n_layer = 2, c.n_head = 4, c.n_kv_head = arch == Arch::Llama ? 2 : 4, c.d_model = 16;
  c.d_ff = 24, c.vocab_size = 20, c.max_seq_len = 16;
  return c;
}

// A llama: RoPE makes a score depend on the distance of its positions only, so with positions
// running on through the window a packed document trains as it would alone, to double rounding
// (measured, AMD EPYC Zen 5: loss 2.8e-16 relative, gradients 2.4e-15 of their largest;
// tolerance 1e-12). Without the mask the packed loss differs (measured: by 9.1%, and by 0.34%
// with the window of 3, which leaves few earlier-document keys to see).
TEST(DocumentMask, PackedDocumentsTrainAsTheyWouldAlone) {
  ModelConfig c = tiny(Arch::Llama);
  for (const int window : {0, 3}) {
    SCOPED_TRACE("window " + std::to_string(window));
    c.sliding_window = window;
    const Packing p = packed_and_alone(c, {});
    EXPECT_NEAR(p.packed, p.alone, 1e-12 * std::abs(p.alone));
    EXPECT_LT(p.gradient_diff, 1e-12);
    EXPECT_GT(std::abs(p.unmasked - p.alone), 1e-3 * std::abs(p.alone))
        << "the mask changed nothing";
  }
}

// A gpt2's learned positions see a packed document's offset: with positions running on, its
// loss differs from the documents' alone (measured: by 3.1%); with document positions (each
// counted from its document's first token) it is theirs, as a llama's is (measured, AMD EPYC
// Zen 5: loss 2.1e-16 and 1.3e-16, gradients 2.7e-16 and 5.3e-16; tolerance 1e-12).
TEST(DocumentMask, DocumentPositionsCountFromEachDocumentsFirstToken) {
  ModelOptions positions;
  positions.document_positions = true;
  const Packing offset = packed_and_alone(tiny(Arch::Gpt2), {});
  EXPECT_GT(std::abs(offset.packed - offset.alone), 1e-3 * std::abs(offset.alone));
  for (const Arch arch : {Arch::Gpt2, Arch::Llama}) {
    SCOPED_TRACE(to_string(arch));
    const Packing p = packed_and_alone(tiny(arch), positions);
    EXPECT_NEAR(p.packed, p.alone, 1e-12 * std::abs(p.alone));
    EXPECT_LT(p.gradient_diff, 1e-12);
  }
}

}  // namespace
}  // namespace mpitrain
