// CPU backend: the blocked sgemm of 2-byte products (see cpu_blocked_gemm.hpp).
#include "cpu_blocked_gemm.hpp"

#include <algorithm>
#include <cstring>

#include "cpu_kernels.hpp"
#include "cpu_side_by_side.hpp"

namespace mpitrain::cpu {

namespace {
// n itself where it fits `limit`, else the largest multiple of 16 within it (at least 16).
int fit(int n, size_t limit) {
  if (static_cast<size_t>(n) <= limit) return n;
  return static_cast<int>(std::max<size_t>(16, limit / 16 * 16));
}
}  // namespace

// The smaller operand's dimension whole (up to kTileElems / 16). Where the smaller operand's
// K rows fit a tile too, K whole (that tile is widened once and held across the larger operand's
// tiles), then the larger operand's dimension as long as that allows. Otherwise (a long K: a
// vocabulary-sized dinp) the larger operand's dimension as long as the C tile allows, then K: with
// M and N whole each operand is widened once, where a longer K chunk instead would split M or N
// and widen the other operand once per piece (GPT-2's head dinp: its weights twice, and a
// 256-row piece).
Tiling tiling(int M, int N, int K) {
  const int small = fit(std::min(M, N), kTileElems / 16);
  const bool k_whole = static_cast<size_t>(small) * K <= kTileElems;
  const int large = fit(std::max(M, N), kTileElems / std::max({small, k_whole ? K : 1, 1}));
  const int k = fit(K, kTileElems / std::max({large, small, 1}));  // K itself where k_whole
  return M >= N ? Tiling{large, small, k} : Tiling{small, large, k};
}

template <typename T>
void blocked_product(Staging& staging, int threads, bool ta, bool tb, int M, int N, int K,
                     CBuf<T> A, CBuf<T> B, bool accumulate, Buf<T> C) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) std::memset(C.data(), 0, static_cast<size_t>(M) * N * C.element_size());
    return;
  }
  const Tiling t = tiling(M, N, K);
  // the scratch tiles: op(A)'s, op(B)'s (as stored: transposed ones by columns) and C's
  const int lda = tile_ld(ta ? t.m : t.k), ldb = tile_ld(tb ? t.k : t.n), ldct = tile_ld(t.n);
  T* const at = staging.take<T>(kSlotA, static_cast<size_t>(ta ? t.k : t.m) * lda);
  T* const bt = staging.take<T>(kSlotB, static_cast<size_t>(tb ? t.n : t.k) * ldb);
  T* const c32 = C.full();
  T* const ct = c32 ? nullptr : staging.take<T>(kSlotC, static_cast<size_t>(t.m) * ldct);
  const bool one_tile = t.m == M && t.n == N && t.k == K;
  const bool a_outer = M >= N;       // A is the larger operand
  int held_start = -1, held_k = -1;  // the smaller operand's tile now in scratch
  const auto tile = [&](int m0, int mt, int n0, int nt) {
    T* c = c32 ? c32 + static_cast<size_t>(m0) * N + n0 : ct;
    const int ldc = c32 ? N : ldct;
    if (!c32 && accumulate) widen_block(ct, ldct, CBuf<T>(C), N, m0, m0 + mt, n0, n0 + nt);
    for (int k0 = 0; k0 < K; k0 += t.k) {
      const int kt = std::min(t.k, K - k0);
      const int small_start = a_outer ? n0 : m0;
      const bool held = small_start == held_start && k0 == held_k;
      if (!(held && !a_outer)) {
        if (ta)
          widen_block(at, lda, A, M, k0, k0 + kt, m0, m0 + mt);
        else
          widen_block(at, lda, A, K, m0, m0 + mt, k0, k0 + kt);
      }
      if (!(held && a_outer)) {
        if (tb)
          widen_block(bt, ldb, B, K, n0, n0 + nt, k0, k0 + kt);
        else
          widen_block(bt, ldb, B, N, k0, k0 + kt, n0, n0 + nt);
      }
      held_start = small_start;
      held_k = k0;
      const RowProduct<T> p{ta, tb, mt, nt, kt, at, lda, bt, ldb, k0 > 0 || accumulate, c, ldc};
      if (one_tile && side_by_side_pays(p.flops(), threads))
        side_by_side({p}, threads);
      else
        p.rows(0, mt);
    }
    if (!c32) narrow_block(C, N, m0, m0 + mt, n0, n0 + nt, ct, ldct);
  };
  if (a_outer) {
    for (int m0 = 0; m0 < M; m0 += t.m)
      for (int n0 = 0; n0 < N; n0 += t.n)
        tile(m0, std::min(t.m, M - m0), n0, std::min(t.n, N - n0));
  } else {
    for (int n0 = 0; n0 < N; n0 += t.n)
      for (int m0 = 0; m0 < M; m0 += t.m)
        tile(m0, std::min(t.m, M - m0), n0, std::min(t.n, N - n0));
  }
}

template void blocked_product<float>(Staging&, int, bool, bool, int, int, int, CBuf<float>,
                                     CBuf<float>, bool, Buf<float>);
template void blocked_product<double>(Staging&, int, bool, bool, int, int, int, CBuf<double>,
                                      CBuf<double>, bool, Buf<double>);

}  // namespace mpitrain::cpu
