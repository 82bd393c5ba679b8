// The blocked sgemm's tiling (src/backend/cpu_blocked_gemm.cpp), the products on 2-byte tensors
// where no bf16 kernel runs (fp16 everywhere): every tile within kTileElems, with its rows'
// padding within kTileScratchElems, and each dimension whole or a multiple of 16; and on the
// linear layers' products each operand widened once, the cost the tiling exists to keep down (its
// numerics: CpuStorage.LinearLayer).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "../../src/backend/cpu_blocked_gemm.hpp"

namespace mpitrain::cpu {
namespace {

std::string shape(int M, int N, int K) {
  return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
}

// A tile dimension: the whole of n, or a multiple of 16 (at least 16) below it.
bool whole_or_16s(int tile, int n) {
  return tile == n || (tile >= 16 && tile < n && tile % 16 == 0);
}

TEST(CpuBlockedGemm, TilesFitTheScratch) {
  for (const int M : {1, 15, 16, 300, 1024, 2000, 4096, 50304, 70000})
    for (const int N : {1, 17, 768, 2000, 3072, 50304, 70000})
      for (const int K : {1, 64, 768, 1024, 5000, 50304}) {
        const Tiling t = tiling(M, N, K);
        SCOPED_TRACE(shape(M, N, K) + " in tiles " + shape(t.m, t.n, t.k));
        EXPECT_TRUE(whole_or_16s(t.m, M));
        EXPECT_TRUE(whole_or_16s(t.n, N));
        EXPECT_TRUE(whole_or_16s(t.k, K));
        // slots A, B and C: op(A)'s tile, op(B)'s, and C's where C is 2-byte; with their rows'
        // padding, stored either way round, within what the planner counts
        for (const auto& [rows, cols] : {std::pair{t.m, t.k}, {t.n, t.k}, {t.m, t.n}}) {
          EXPECT_LE(static_cast<size_t>(rows) * cols, kTileElems);
          EXPECT_LE(static_cast<size_t>(rows) * tile_ld(cols), kTileScratchElems);
          EXPECT_LE(static_cast<size_t>(cols) * tile_ld(rows), kTileScratchElems);
        }
      }
}

// GPT-2 small's and Llama's linear layers at 1024 tokens (C 768; OC 2304, 768, 3072, 50304 and
// 32000; Llama's MLP 2048): forward out(N,OC) = inp W^T and dW(OC,IC) = dout^T inp have the
// smaller operand's rows of K in one tile, held across the larger operand's tiles; dinp(N,IC) =
// dout W with its long K (OC) has M and N whole, its K in chunks. Either way no operand is widened
// twice. The tiling before this test took K as long as it could in dinp and split M instead
// (the head's 1024 tokens as 768 + 256): its 38.6M weights widened twice.
TEST(CpuBlockedGemm, EachOperandOfALinearLayerWidenedOnce) {
  constexpr int kTokens = 1024;
  for (const auto& [IC, OC] : {std::pair{768, 2304},
                               {768, 768},
                               {768, 3072},
                               {3072, 768},
                               {768, 50304},
                               {768, 32000},
                               {768, 2048},
                               {2048, 768}}) {
    SCOPED_TRACE("IC " + std::to_string(IC) + " OC " + std::to_string(OC));
    const Tiling fwd = tiling(kTokens, OC, IC), dw = tiling(OC, IC, kTokens),
                 dinp = tiling(kTokens, IC, OC);
    const auto small_held = [](const Tiling& t, int M, int N, int K) {
      return t.k == K && (M >= N ? t.n == N : t.m == M);
    };
    EXPECT_TRUE(small_held(fwd, kTokens, OC, IC) || (fwd.m == kTokens && fwd.n == OC));
    EXPECT_TRUE(small_held(dw, OC, IC, kTokens) || (dw.m == OC && dw.n == IC));
    EXPECT_TRUE(small_held(dinp, kTokens, IC, OC) || (dinp.m == kTokens && dinp.n == IC));
  }
}

}  // namespace
}  // namespace mpitrain::cpu
