// CPU backend: causal self-attention in O(T) memory (flash attention). Queries go in tiles of
// cpu_attention_tile(Tk) rows (32, or 128 against long keys) against tiles of as many keys, with
// an online softmax: forward keeps a running row max m, row sum l and the unnormalised output,
// and saves only each row's log-sum-exp lse = m + log l; backward recomputes each tile's
// probabilities P = exp(scale q k^T - lse) and, with D = rowsum(dout * out) per row, gets
// dS = P (dout v^T - D) scale. A tile whose queries all precede its keys is skipped; one whose
// queries all follow its keys is not masked; one the mask cuts (the diagonal) goes in two halves
// of its queries, each against the keys it sees (3/4 of the scores: at T 64 flash + backward went
// from 0.94x the dense kernel's speed to 1.00x, bench/attention_bench.cpp at 1 thread). The
// score tiles live on the stack. The whole-sequence attention and context parallelism's block
// pairs are the same kernels: positions 0..T-1 and the own keys for the former. The tiles'
// products (Tiles): in bf16 training on a CPU with AVX512-BF16 on bf16 operands (Bf16Tiles);
// else, where the CPU has AVX-512 or AVX2 with FMA, on our fp32 kernel, reading q, v, dout, k, P
// and dS where they lie and a head's k^T and v^T transposed once a key tile (Fp32Tiles); else the
// BLAS, reading q, k, v through leading dimensions (the tests' double).
// Deterministic: one thread per (batch, head) in forward and per (batch, kv head) in backward
// (each output has one writer), tiles in a fixed order. On 2-byte tensors the whole-sequence
// attention widens one head's sequences per thread where they fit (per_head_fits), else whole
// sequences at a time, as the block API does (cpu_storage.hpp); lse, D and the block API's
// accumulators are T.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "cpu_bf16_tiles.hpp"
#include "cpu_blocked_gemm.hpp"
#include "cpu_fp32_tiles.hpp"
#include "cpu_kernels.hpp"
#include "cpu_storage.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {

using cpu::gemm;

namespace {

// The score tiles on the stack hold the largest tile; a call's tile is its ld.
constexpr int kMaxTile = kAttentionTileLong;

template <typename T>
constexpr bool kFloat = std::is_same_v<T, float>;  // the tiles are float's (the others: tests)

// Row i's position: pos[i], or i where pos is null (the whole sequence).
inline int position(const int* pos, int i) { return pos ? pos[i] : i; }

// What the query rows of one sequence see (attention_sees): the rows' and keys' positions, the
// window, and the rows' document starts (null: none).
struct Sight {
  const int* qpos;     // (Tq), null: 0..Tq-1
  const int* kpos;     // (Tk), null: 0..Tk-1
  int window;          // 0: none
  const int32_t* doc;  // (Tq) or null
  int q(int i) const { return position(qpos, i); }
  int k(int j) const { return position(kpos, j); }
  int first(int i) const { return first_seen(q(i), window, doc ? doc[i] : 0); }
  bool sees(int i, int j) const { return attention_sees(q(i), k(j), window, doc ? doc[i] : 0); }
};

// How the keys [j0, j0 + nk) are seen by the queries [i0, i0 + nq) (attention_sees): not at all
// (skipped), wholly (no mask), or in part (masked per element).
enum class TileMask { None, All, Some };
TileMask tile_mask(const Sight& s, int i0, int nq, int j0, int nk) {
  int qlo = s.q(i0), qhi = qlo, flo = s.first(i0), fhi = flo, klo = s.k(j0), khi = klo;
  for (int i = i0; i < i0 + nq; ++i) {
    qlo = std::min(qlo, s.q(i));
    qhi = std::max(qhi, s.q(i));
    flo = std::min(flo, s.first(i));
    fhi = std::max(fhi, s.first(i));
  }
  for (int j = j0; j < j0 + nk; ++j) {
    klo = std::min(klo, s.k(j));
    khi = std::max(khi, s.k(j));
  }
  // none: every key after every query, or before every query's first (window, document)
  if (qhi < klo || khi < flo) return TileMask::None;
  // all: every key at or before every query and at or after every query's first
  return qlo >= khi && klo >= fhi ? TileMask::All : TileMask::Some;
}

// How many of the keys [j0, j0 + nk) up to the last one at or before some query of
// [i0, i0 + nq) (those a window or a document leaves out among them are masked).
int seen_keys(const Sight& s, int i0, int nq, int j0, int nk) {
  int qhi = s.q(i0);
  for (int i = i0; i < i0 + nq; ++i) qhi = std::max(qhi, s.q(i));
  int n = 0;
  for (int c = 0; c < nk; ++c)
    if (s.k(j0 + c) <= qhi) n = c + 1;
  return n;
}

// f(r0, nr, nk', mask') for the parts of the tile (queries i0 + [0, nq), keys [j0, j0 + nk)) to
// compute: the whole tile unless the mask cuts it, else square halves of tile / 2 queries, each
// against the leading keys it sees (on the diagonal 3/4 of the scores).
template <class F>
void for_tile_parts(int tile, const Sight& s, int i0, int nq, int j0, int nk, TileMask mask,
                    F&& f) {
  const int half = tile / 2;
  if (mask != TileMask::Some || nq <= half) return f(0, nq, nk, mask);
  for (int r0 = 0; r0 < nq; r0 += half) {
    const int nr = std::min(half, nq - r0);
    const int seen = seen_keys(s, i0 + r0, nr, j0, nk);
    if (seen == 0) continue;
    const TileMask part = tile_mask(s, i0 + r0, nr, j0, seen);
    if (part != TileMask::None) f(r0, nr, seen, part);  // none: the keys precede its firsts
  }
}

// Which kernels multiply a call's tiles: the BLAS (sgemm, or dgemm in the tests), the fp32 tiles
// (Fp32Tiles) or the bf16 tiles (Bf16Tiles); and the threads' regions of the packs the latter
// two keep.
enum class TileKernel { Blas, Fp32, Bf16 };
struct Tiles {
  TileKernel kernel = TileKernel::Blas;
  std::optional<cpu::ThreadRows<std::byte>> regions;        // none for the BLAS
  size_t bytes = 0;                                         // of each thread's region
  std::byte* region() const { return regions->row(0, 0); }  // the calling thread's
};

// The operands of one block pair, all T (fp32 in the trainer), B sequences each:
// query head h of row t of sequence b at q[(b Tq + t) q_ld + h hs]; key head g of key row r at
// kv[(b Tk + r) kv_ld + g hs], its value head at kv[... + (NKV + g) hs].
template <typename T>
struct BlockPair {
  const T* q;
  size_t q_ld;
  const T* kv;
  size_t kv_ld;
  const int* qpos;  // (Tq), null: 0..Tq-1
  const int* kpos;  // (Tk), null: 0..Tk-1
  int B, Tq, Tk, NH, NKV, hs;
  T scale;
  AttentionMask mask;  // its doc_starts (B, Tq), of these B sequences
  const Tiles* tiles;  // the kernels of the tiles' products
  Sight sight(int b) const { return {qpos, kpos, mask.window, mask.from(b, Tq).doc_starts}; }
  size_t k_at(int b, int j0, int g) const { return (static_cast<size_t>(b) * Tk + j0) * kv_ld + g * hs; }
  size_t v_at(int b, int j0, int g) const { return k_at(b, j0, NKV + g); }
  size_t q_at(int b, int i0, int h) const { return (static_cast<size_t>(b) * Tq + i0) * q_ld + h * hs; }
};

// A thread's region of tile packs (Tiles::region, of capacity bytes), handed out in arrays from
// 64-byte boundaries; with no region (null) the arrays are only counted (bytes()).
class RegionArrays {
 public:
  RegionArrays(std::byte* region, size_t capacity) : region_(region), capacity_(capacity) {}
  template <typename W>
  W* take(size_t n) {
    const size_t at = end_;
    end_ += (n * sizeof(W) + 63) / 64 * 64;
    if (!region_) return nullptr;
    if (end_ > capacity_)
      MPITRAIN_THROW("attention's tile packs need " + std::to_string(end_) +
                     " bytes of a region of " + std::to_string(capacity_));
    return reinterpret_cast<W*>(region_ + at);
  }
  size_t bytes() const { return end_; }

 private:
  std::byte* region_;
  size_t capacity_, end_ = 0;
};

// The slots of a head's packed key tiles in a region. Where all of a head's key tiles' packs take
// at most kKeptPacks bytes, each is packed on its first use and kept for the later query tiles;
// else there is one slot and every use packs it again (long sequences: their tiles are larger,
// the packing a smaller share of the work).
class KeyTileSlots {
 public:
  KeyTileSlots(RegionArrays& arrays, int tile, int Tk, size_t bytes_per_tile) : tile_(tile) {
    const size_t tiles = (Tk + tile - 1) / tile;
    count_ = tiles * bytes_per_tile <= kKeptPacks ? tiles : 1;
    packed_ = arrays.take<unsigned char>(count_);
    if (packed_) std::fill_n(packed_, count_, 0);
  }
  size_t count() const { return count_; }
  // The slot of the key tile from key j0, and whether it is to be packed now (not packed yet).
  std::pair<size_t, bool> use(int j0) {
    if (count_ == 1) return {0, true};
    const size_t t = j0 / tile_;
    const bool pack = packed_[t] == 0;
    packed_[t] = 1;
    return {t, pack};
  }

 private:
  static constexpr size_t kKeptPacks = size_t{1} << 20;  // per thread: T <= 2688 at hs 64 (bf16)
  int tile_;
  size_t count_;
  unsigned char* packed_;  // per slot: 1 once packed
};

// The bf16 operands of one head's tiles, packed as cpu_bf16_tiles.hpp reads them (pairs of bf16
// along the product's K): a query tile's q and dout, each as rows (pairs along hs: q k^T,
// dout v^T) and by rows (pairs along the queries: dS^T q, P^T dout); a key tile's k and v
// transposed (q k^T, dout v^T) and by rows (P v, dS k); and one of P or dS. Where the CPU has
// AVX512-BF16, bf16 training multiplies attention's tiles this way, as flash attention does on a
// GPU: q, k, v and dout are bf16 already, and P and dS are rounded to bf16 for their products,
// while the softmax, its sums and every accumulation stay fp32. 2.2x OpenBLAS's fp32 rate on
// these tiles (cpu_bf16_tiles.cpp).
class Bf16Tiles {
 public:
  int hs, hs2, hs_ld;  // head size, its pair_count and pair_ld
  // a query tile's q and dout as rows and by rows; a P or dS
  uint32_t *q_rows, *dy_rows, *q_by_rows, *dy_by_rows, *a;
  // the current key tile's packs (k^T and v^T: ld key_ld; k and v by rows: ld hs_ld)
  const uint32_t *k_t = nullptr, *v_t = nullptr, *k_by_rows = nullptr, *v_by_rows = nullptr;
  int key_ld = 0;

  // Bytes of a thread's region (Tiles::region): every array below.
  static size_t bytes(int tile, int hs, int Tk) {
    return Bf16Tiles(nullptr, 0, tile, hs, Tk, true).arrays_.bytes();
  }

  // For forward (k^T and v of each key tile) or backward (k^T, v^T and k), in region (a
  // thread's, of capacity >= bytes(tile, hs, Tk); null: only sized).
  Bf16Tiles(std::byte* region, size_t capacity, int tile, int head_size, int Tk, bool backward)
      : hs(head_size),
        hs2(cpu::pair_count(hs)),
        hs_ld(cpu::pair_ld(hs)),
        backward_(backward),
        transposed_(size_t(hs2) * cpu::pair_ld(tile)),
        by_rows_(size_t(cpu::pair_count(tile)) * hs_ld),
        arrays_(region, capacity),
        slots_(arrays_, tile, Tk, (transposed_ + 2 * by_rows_) * sizeof(uint32_t)) {
    q_rows = arrays_.take<uint32_t>(size_t(tile) * hs2);
    dy_rows = arrays_.take<uint32_t>(size_t(tile) * hs2);
    q_by_rows = arrays_.take<uint32_t>(by_rows_);
    dy_by_rows = arrays_.take<uint32_t>(by_rows_);
    a = arrays_.take<uint32_t>(size_t(cpu::pair_count(tile)) *
                               std::max(cpu::pair_ld(tile), 2 * tile));
    k_t_ = arrays_.take<uint32_t>(slots_.count() * transposed_);
    v_t_ = arrays_.take<uint32_t>(slots_.count() * transposed_);
    by_rows_packs_ =
        arrays_.take<uint32_t>(slots_.count() * by_rows_);  // k in backward, v in forward
  }
  // a query tile's nq rows: q (ld q_ld); in backward dout too (ld dy_ld), and both by rows
  void queries(const float* q, size_t q_ld, int nq) { cpu::pack_pairs(q, q_ld, nq, hs, q_rows); }
  void backward_queries(const float* q, size_t q_ld, const float* dy, size_t dy_ld, int nq) {
    queries(q, q_ld, nq);
    cpu::pack_pairs(dy, dy_ld, nq, hs, dy_rows);
    cpu::pack_pairs_by_rows(q, q_ld, nq, hs, q_by_rows);
    cpu::pack_pairs_by_rows(dy, dy_ld, nq, hs, dy_by_rows);
  }
  // the key tile from key j0 (nk keys k and values v, ld ld) becomes the current one, packed
  void keys(int j0, const float* k, const float* v, size_t ld, int nk) {
    const auto [t, pack] = slots_.use(j0);
    key_ld = cpu::pair_ld(nk);
    k_t = k_t_ + t * transposed_;
    v_t = v_t_ + t * transposed_;
    uint32_t* by_rows = by_rows_packs_ + t * by_rows_;
    (backward_ ? k_by_rows : v_by_rows) = by_rows;
    if (!pack) return;
    cpu::pack_pairs_transposed(k, ld, nk, hs, k_t_ + t * transposed_);
    if (backward_) {
      cpu::pack_pairs_transposed(v, ld, nk, hs, v_t_ + t * transposed_);
      cpu::pack_pairs_by_rows(k, ld, nk, hs, by_rows);
    } else {
      cpu::pack_pairs_by_rows(v, ld, nk, hs, by_rows);
    }
  }
  // rows [r0, r0 + nr) of a query tile packed by rows (r0 even: a pair never spans two parts)
  const uint32_t* by_rows(const uint32_t* packed, int r0) const {
    return packed + size_t(r0 / 2) * hs_ld;
  }

 private:
  bool backward_;
  size_t transposed_, by_rows_;  // words per key tile of k^T / v^T, and of k / v by rows
  RegionArrays arrays_;
  KeyTileSlots slots_;
  uint32_t *k_t_, *v_t_, *by_rows_packs_;
};

// The transposed key tiles of one head where fp32 tiles multiply attention's tiles
// (cpu_fp32_tiles.hpp): k^T (q k^T) and in backward v^T (dout v^T), B's rows in those products
// (ld key_ld); every other operand is read in place.
class Fp32Tiles {
 public:
  const float *k_t = nullptr, *v_t = nullptr;  // the current key tile's
  int key_ld = 0;

  // Bytes of a thread's region (Tiles::region): the larger direction's. Each keeps its key tiles
  // where its own packs fit, and forward's k^T alone may where backward's k^T and v^T do not (T
  // 4096 at hs 64).
  static size_t bytes(int tile, int hs, int Tk) {
    return std::max(Fp32Tiles(nullptr, 0, tile, hs, Tk, false).arrays_.bytes(),
                    Fp32Tiles(nullptr, 0, tile, hs, Tk, true).arrays_.bytes());
  }

  // For forward (k^T of each key tile) or backward (k^T and v^T), in region (a thread's, of
  // capacity >= bytes(tile, hs, Tk); null: only sized).
  Fp32Tiles(std::byte* region, size_t capacity, int tile, int hs, int Tk, bool backward)
      : hs_(hs),
        transposed_(size_t(hs) * cpu::rows_ld(tile)),
        arrays_(region, capacity),
        slots_(arrays_, tile, Tk, (backward ? 2 : 1) * transposed_ * sizeof(float)) {
    k_t_ = arrays_.take<float>(slots_.count() * transposed_);
    v_t_ = backward ? arrays_.take<float>(slots_.count() * transposed_) : nullptr;
  }
  // the key tile from key j0 (nk keys k and values v, ld ld) becomes the current one, transposed
  void keys(int j0, const float* k, const float* v, size_t ld, int nk) {
    const auto [t, pack] = slots_.use(j0);
    key_ld = cpu::rows_ld(nk);
    k_t = k_t_ + t * transposed_;
    if (v_t_) v_t = v_t_ + t * transposed_;
    if (!pack) return;
    cpu::transpose_rows(k, ld, nk, hs_, k_t_ + t * transposed_);
    if (v_t_) cpu::transpose_rows(v, ld, nk, hs_, v_t_ + t * transposed_);
  }

 private:
  int hs_;
  size_t transposed_;  // floats per key tile of k^T or v^T
  RegionArrays arrays_;
  KeyTileSlots slots_;
  float *k_t_, *v_t_;  // v_t_: backward's alone (null in forward)
};

// The kernels of a call's tiles: the bf16 tiles in bf16 training on a CPU with AVX512-BF16
// (bf16_tiles), else the fp32 tiles where the CPU has AVX-512 or AVX2 with FMA, else the BLAS.
template <typename T>
TileKernel tile_kernel(bool bf16_tiles) {
  if (!kFloat<T>) return TileKernel::Blas;
  if (bf16_tiles) return TileKernel::Bf16;
  return cpu::fp32_tiles() ? TileKernel::Fp32 : TileKernel::Blas;
}

// A call's tile kernels and their threads' regions in the staging (kSlotTiles).
template <typename T>
Tiles call_tiles(bool bf16_tiles, cpu::Staging& staging, int Tk, int hs) {
  const TileKernel kernel = tile_kernel<T>(bf16_tiles);
  const int tile = cpu_attention_tile(Tk);
  const auto with_regions = [&](size_t bytes) {
    return Tiles{kernel, cpu::ThreadRows<std::byte>(staging, cpu::kSlotTiles, 1, bytes), bytes};
  };
  if (kernel == TileKernel::Bf16) return with_regions(Bf16Tiles::bytes(tile, hs, Tk));
  if (kernel == TileKernel::Fp32) return with_regions(Fp32Tiles::bytes(tile, hs, Tk));
  return {};
}

// One head's packs of its call's tile kernel (forward_head, backward_head).
class HeadTiles {
 public:
  HeadTiles(const Tiles& tiles, int tile, int hs, int Tk, bool backward) {
    if (tiles.kernel == TileKernel::Bf16)
      bf16_.emplace(tiles.region(), tiles.bytes, tile, hs, Tk, backward);
    if (tiles.kernel == TileKernel::Fp32)
      fp32_.emplace(tiles.region(), tiles.bytes, tile, hs, Tk, backward);
  }
  Bf16Tiles* bf16() { return bf16_ ? &*bf16_ : nullptr; }
  const Fp32Tiles* fp32() const { return fp32_ ? &*fp32_ : nullptr; }
  // the key tile from key j0 (nk keys k and values v, ld ld) becomes the current one
  void keys(int j0, const float* k, const float* v, size_t ld, int nk) {
    if (bf16_) bf16_->keys(j0, k, v, ld, nk);
    if (fp32_) fp32_->keys(j0, k, v, ld, nk);
  }

 private:
  std::optional<Bf16Tiles> bf16_;
  std::optional<Fp32Tiles> fp32_;
};

// C (M x N, ldc) = A B, or C += A B where accumulate; B (K x N) stored as rows (ldb), A (M x K)
// as rows (lda) or transposed (ta: A^T stored as rows). On the fp32 tiles where they run (ft),
// else the BLAS.
template <typename T>
void tile_gemm(const Fp32Tiles* ft, bool ta, int M, int N, int K, const T* A, size_t lda,
               const T* B, size_t ldb, bool accumulate, T* C, size_t ldc) {
  if constexpr (kFloat<T>) {
    if (ft)
      return cpu::fp32_tile_product(M, N, K, A, ta ? 1 : lda, ta ? lda : 1, B, ldb, C, ldc,
                                    accumulate);
  }
  gemm(ta ? CblasTrans : CblasNoTrans, CblasNoTrans, M, N, K, T(1), A, lda, B, ldb,
       accumulate ? T(1) : T(0), C, ldc);
}

// S (nq, nk; ld tile) = scale q_i k_j^T, the entries whose key the query does not see -inf. With
// bf16 tiles, from the packed q rows (the tile's row r0 on) and k^T; with fp32 tiles, from q and
// k^T.
template <typename T>
void tile_scores(T* S, int tile, const BlockPair<T>& p, const Sight& sight, const T* q, const T* k,
                 int i0, int nq, int j0, int nk, TileMask mask, HeadTiles& ht, int r0) {
  const Bf16Tiles* bt = ht.bf16();
  const Fp32Tiles* ft = ht.fp32();
  if (!bt && !ft)
    gemm(CblasNoTrans, CblasTrans, nq, nk, p.hs, p.scale, q, p.q_ld, k, p.kv_ld, T(0), S, tile);
  if constexpr (kFloat<T>) {
    if (bt)
      cpu::bf16_tile_product(nq, nk, bt->hs2, bt->q_rows + size_t(r0) * bt->hs2, bt->hs2, 1,
                             bt->k_t, bt->key_ld, S, tile, false);
    if (ft) cpu::fp32_tile_product(nq, nk, p.hs, q, p.q_ld, 1, ft->k_t, ft->key_ld, S, tile, false);
    if (bt || ft)
      for (int r = 0; r < nq; ++r)
#pragma omp simd
        for (int c = 0; c < nk; ++c) S[r * tile + c] *= p.scale;
  }
  if (mask != TileMask::Some) return;
  for (int r = 0; r < nq; ++r)
    for (int c = 0; c < nk; ++c)
      if (!sight.sees(i0 + r, j0 + c)) S[r * tile + c] = -std::numeric_limits<T>::infinity();
}

// Forward of one block pair for query head h of sequence b, into out (ld NH hs) and lse
// (B, NH, Tq). merge: the earlier blocks' (out, lse) start the online softmax as m = lse, l = 1
// (out is normalised), which equals lse' = logaddexp(lse, lse_b), out' = out e^(lse - lse') +
// out_b e^(lse_b - lse').
template <typename T>
void forward_head(T* out, T* lse, const BlockPair<T>& p, int b, int h, bool merge) {
  const T ninf = -std::numeric_limits<T>::infinity();
  const int A = p.NH * p.hs, group = p.NH / p.NKV, tile = cpu_attention_tile(p.Tk);
  const int g = h / group, bh = b * p.NH + h;
  const Sight sight = p.sight(b);
  T S[kMaxTile * kMaxTile], m[kMaxTile], l[kMaxTile];
  HeadTiles ht(*p.tiles, tile, p.hs, p.Tk, false);
  Bf16Tiles* bt = ht.bf16();
  for (int i0 = 0; i0 < p.Tq; i0 += tile) {
    const int nq = std::min(tile, p.Tq - i0);
    const T* q = p.q + p.q_at(b, i0, h);
    T* o = out + (static_cast<size_t>(b) * p.Tq + i0) * A + h * p.hs;  // (nq, hs; ld A)
    T* L = lse + (static_cast<size_t>(bh)) * p.Tq + i0;
    if constexpr (kFloat<T>)
      if (bt) bt->queries(q, p.q_ld, nq);
    for (int r = 0; r < nq; ++r) {
      m[r] = merge ? L[r] : ninf;
      l[r] = m[r] == ninf ? T(0) : T(1);
      if (l[r] == T(0)) std::fill_n(o + static_cast<size_t>(r) * A, p.hs, T(0));
    }
    // rows [r0, r0 + nr) of the tile against keys [j0, j0 + nk): S, the online softmax, o += P v
    const auto absorb = [&](int j0, int r0, int nr, int nk, TileMask mask) {
      tile_scores(S + r0 * tile, tile, p, sight, q + r0 * p.q_ld, p.kv + p.k_at(b, j0, g), i0 + r0,
                  nr, j0, nk, mask, ht, r0);
      for (int r = r0; r < r0 + nr; ++r) {  // S row -> exp(s - m'), m' the new running max
        T* row = S + r * tile;
        const T mnew = std::max(m[r], cpu::max_of(row, nk));
        T sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < nk; ++c) {
          row[c] = row[c] == ninf ? T(0) : cpu::exp_fast(row[c] - mnew);
          sum += row[c];
        }
        if (mnew == ninf) continue;  // the row has seen no key yet: all zeros
        if (m[r] != mnew) {          // rescale what came before: e^(m - m')
          const T alpha = m[r] == ninf ? T(0) : cpu::exp_fast(m[r] - mnew);
          T* orow = o + static_cast<size_t>(r) * A;
#pragma omp simd
          for (int c = 0; c < p.hs; ++c) orow[c] *= alpha;
          l[r] *= alpha;
        }
        l[r] += sum;
        m[r] = mnew;
      }
      if constexpr (kFloat<T>) {
        if (bt) {  // o += P v, P rounded to bf16
          const int k2 = cpu::pair_count(nk);
          cpu::pack_pairs(S + r0 * tile, tile, nr, nk, bt->a);
          return cpu::bf16_tile_product(nr, p.hs, k2, bt->a, k2, 1, bt->v_by_rows, bt->hs_ld,
                                        o + static_cast<size_t>(r0) * A, A, true);
        }
      }
      tile_gemm(ht.fp32(), false, nr, p.hs, nk, S + r0 * tile, tile, p.kv + p.v_at(b, j0, g),
                p.kv_ld, true, o + static_cast<size_t>(r0) * A, A);
    };
    for (int j0 = 0; j0 < p.Tk; j0 += tile) {
      const int nk = std::min(tile, p.Tk - j0);
      const TileMask mask = tile_mask(sight, i0, nq, j0, nk);
      if (mask == TileMask::None) continue;
      if constexpr (kFloat<T>)
        ht.keys(j0, p.kv + p.k_at(b, j0, g), p.kv + p.v_at(b, j0, g), p.kv_ld, nk);
      for_tile_parts(
          tile, sight, i0, nq, j0, nk, mask,
          [&](int r0, int nr, int seen, TileMask part) { absorb(j0, r0, nr, seen, part); });
    }
    for (int r = 0; r < nq; ++r) {  // out = acc / l, lse = m + log l; -inf, 0 for no key
      T* orow = o + static_cast<size_t>(r) * A;
      const T inv = l[r] > T(0) ? T(1) / l[r] : T(0);
#pragma omp simd
      for (int c = 0; c < p.hs; ++c) orow[c] *= inv;
      L[r] = l[r] > T(0) ? m[r] + std::log(l[r]) : ninf;
    }
  }
}

// forward_head for every (b, h), one thread each.
template <typename T>
void block_forward_kernel(T* out, T* lse, const BlockPair<T>& p, bool merge) {
  const bool parallel = static_cast<size_t>(p.B) * p.NH * p.Tq * p.Tk * p.hs > cpu::kParallelWork;
#pragma omp parallel for schedule(static) if (parallel)
  for (int bh = 0; bh < p.B * p.NH; ++bh) forward_head(out, lse, p, bh / p.NH, bh % p.NH, merge);
}

// Backward of one block pair for query head h of sequence b (kv head g = h / group); every tile
// adds to dq (ld dq_ld) and dkv (dk head g at g hs, dv at (NKV+g) hs; ld dkv_ld):
//   P = exp(S - lse);  dv += P^T dout;  dS = P (dout v^T - D) scale;  dq += dS k;  dk += dS^T q.
template <typename T>
void backward_head(T* dq, size_t dq_ld, T* dkv, size_t dkv_ld, const T* dout, const T* lse,
                   const T* D, const BlockPair<T>& p, int b, int h) {
  const T ninf = -std::numeric_limits<T>::infinity();
  const int A = p.NH * p.hs, g = h / (p.NH / p.NKV), tile = cpu_attention_tile(p.Tk);
  T P[kMaxTile * kMaxTile], dS[kMaxTile * kMaxTile];
  const size_t row0 = (static_cast<size_t>(b) * p.NH + h) * p.Tq;  // (b, h)'s lse and D
  const Sight sight = p.sight(b);
  HeadTiles ht(*p.tiles, tile, p.hs, p.Tk, true);
  Bf16Tiles* bt = ht.bf16();
  const Fp32Tiles* ft = ht.fp32();
  for (int i0 = 0; i0 < p.Tq; i0 += tile) {
    const int nq = std::min(tile, p.Tq - i0);
    const T* q = p.q + p.q_at(b, i0, h);
    const T* dy = dout + (static_cast<size_t>(b) * p.Tq + i0) * A + h * p.hs;
    T* dqi = dq + (static_cast<size_t>(b) * p.Tq + i0) * dq_ld + h * p.hs;
    if constexpr (kFloat<T>)
      if (bt) bt->backward_queries(q, p.q_ld, dy, A, nq);
    for (int j0 = 0; j0 < p.Tk; j0 += tile) {
      const int nk = std::min(tile, p.Tk - j0);
      const TileMask mask = tile_mask(sight, i0, nq, j0, nk);
      if (mask == TileMask::None) continue;
      const T* k = p.kv + p.k_at(b, j0, g);
      const T* v = p.kv + p.v_at(b, j0, g);
      T* dk = dkv + (static_cast<size_t>(b) * p.Tk + j0) * dkv_ld + g * p.hs;
      T* dv = dk + static_cast<size_t>(p.NKV) * p.hs;
      if constexpr (kFloat<T>) ht.keys(j0, k, v, p.kv_ld, nk);
      // rows [r0, r0 + nr) of the tile against keys [j0, j0 + n)
      const auto part = [&](int r0, int nr, int n, TileMask m) {
        const T* qr = q + r0 * p.q_ld;
        const T* dyr = dy + static_cast<size_t>(r0) * A;
        tile_scores(P, tile, p, sight, qr, k, i0 + r0, nr, j0, n, m, ht, r0);
        for (int r = 0; r < nr; ++r) {
          T* row = P + r * tile;
          const T lr = lse[row0 + i0 + r0 + r];
#pragma omp simd
          for (int c = 0; c < n; ++c)
            row[c] = row[c] == ninf || lr == ninf ? T(0) : cpu::exp_fast(row[c] - lr);
        }
        if (bt) {  // dv += P^T dout; dS = dout v^T
          if constexpr (kFloat<T>) {
            cpu::pack_pairs_by_rows(P, tile, nr, n, bt->a);
            cpu::bf16_tile_product(n, p.hs, cpu::pair_count(nr), bt->a, 1, cpu::pair_ld(n),
                                   bt->by_rows(bt->dy_by_rows, r0), bt->hs_ld, dv, dkv_ld, true);
            cpu::bf16_tile_product(nr, n, bt->hs2, bt->dy_rows + size_t(r0) * bt->hs2, bt->hs2, 1,
                                   bt->v_t, bt->key_ld, dS, tile, false);
          }
        } else {
          tile_gemm(ft, true, n, p.hs, nr, P, tile, dyr, A, true, dv, dkv_ld);
          if constexpr (kFloat<T>) {
            if (ft)
              cpu::fp32_tile_product(nr, n, p.hs, dyr, A, 1, ft->v_t, ft->key_ld, dS, tile, false);
          }
          if (!ft)
            gemm(CblasNoTrans, CblasTrans, nr, n, p.hs, T(1), dyr, A, v, p.kv_ld, T(0), dS, tile);
        }
        for (int r = 0; r < nr; ++r) {
          const T* prow = P + r * tile;
          T* drow = dS + r * tile;
          const T d = D[row0 + i0 + r0 + r];
#pragma omp simd
          for (int c = 0; c < n; ++c) drow[c] = prow[c] * (drow[c] - d) * p.scale;
        }
        if (bt) {  // dq += dS k; dk += dS^T q
          if constexpr (kFloat<T>) {
            const int k2 = cpu::pair_count(n);
            cpu::pack_pairs(dS, tile, nr, n, bt->a);
            cpu::bf16_tile_product(nr, p.hs, k2, bt->a, k2, 1, bt->k_by_rows, bt->hs_ld,
                                   dqi + r0 * dq_ld, dq_ld, true);
            cpu::pack_pairs_by_rows(dS, tile, nr, n, bt->a);
            cpu::bf16_tile_product(n, p.hs, cpu::pair_count(nr), bt->a, 1, cpu::pair_ld(n),
                                   bt->by_rows(bt->q_by_rows, r0), bt->hs_ld, dk, dkv_ld, true);
          }
        } else {
          tile_gemm(ft, false, nr, p.hs, n, dS, tile, k, p.kv_ld, true, dqi + r0 * dq_ld, dq_ld);
          tile_gemm(ft, true, n, p.hs, nr, dS, tile, qr, p.q_ld, true, dk, dkv_ld);
        }
      };
      for_tile_parts(tile, sight, i0, nq, j0, nk, mask, part);
    }
  }
}

// backward_head per (b, kv head g), over its query heads in order, one thread each (dk_g, dv_g and
// their dq have one writer).
template <typename T>
void block_backward_kernel(T* dq, size_t dq_ld, T* dkv, size_t dkv_ld, const T* dout,
                           const T* lse, const T* D, const BlockPair<T>& p) {
  const int group = p.NH / p.NKV;
  const bool parallel = static_cast<size_t>(p.B) * p.NH * p.Tq * p.Tk * p.hs > cpu::kParallelWork;
#pragma omp parallel for schedule(static) if (parallel)
  for (int bg = 0; bg < p.B * p.NKV; ++bg) {
    const int b = bg / p.NKV, g = bg % p.NKV;
    for (int h = g * group; h < (g + 1) * group; ++h)
      backward_head(dq, dq_ld, dkv, dkv_ld, dout, lse, D, p, b, h);
  }
}

// sum over hs columns of a * b: one row's D
template <typename T>
inline T row_dot(const T* a, const T* b, int hs) {
  T s = 0;
#pragma omp simd reduction(+ : s)
  for (int c = 0; c < hs; ++c) s += a[c] * b[c];
  return s;
}

// D(B, NH, Tq) = rowsum over each head's hs columns of dout * out.
template <typename T>
void row_dot_kernel(T* D, const T* dout, const T* out, int B, int Tq, int NH, int hs) {
  const size_t A = static_cast<size_t>(NH) * hs;
#pragma omp parallel for schedule(static) if (static_cast<size_t>(B) * Tq * A > cpu::kParallelWork)
  for (int bh = 0; bh < B * NH; ++bh) {
    const int b = bh / NH, h = bh % NH;
    for (int t = 0; t < Tq; ++t) {
      const size_t at = (static_cast<size_t>(b) * Tq + t) * A + h * hs;
      D[static_cast<size_t>(bh) * Tq + t] = row_dot(dout + at, out + at, hs);
    }
  }
}

// Elements per sequence of qkv and out (and dout): a staged call's strides.
struct SequenceSizes {
  size_t qkv, out;
  SequenceSizes(int Tlen, int NH, int NKV, int hs)
      : qkv(static_cast<size_t>(Tlen) * (NH + 2 * NKV) * hs), out(static_cast<size_t>(Tlen) * NH * hs) {}
};

// Elements a staged copy of nb sequences of kv (Tk rows of stride kv_ld, 2 NKV hs read per row)
// spans: the last row is read only up to its v heads (kv may sit inside qkv at an offset).
size_t kv_span(int nb, int Tk, int kv_ld, int NKV, int hs) {
  return (static_cast<size_t>(nb) * Tk - 1) * kv_ld + static_cast<size_t>(2) * NKV * hs;
}

// One head's sequence per thread on 2-byte tensors: each thread widens its own (b, h)'s rows of
// q, k, v (and in backward dout, out) into arrays of its own (L2), runs the fp32 kernel for that
// head on them (a BlockPair of one head, B = 1) and rounds its outputs into the tensor: whole
// sequences widened into the scratch took 1.3x (forward) and 1.2x (backward) the fp32 op (GPT-2
// small, 2 threads). The threads' arrays (two sequences of one head each, cpu::ThreadRows) come
// from slots A-D, and the way is taken where each slot's fit in what the whole-sequence way takes
// of it, which the planner counts (cpu_staging_bytes: a sequence of qkv in A-C, of out or a block
// in D); otherwise whole sequences.
bool per_head_fits(int slots, int Tlen, int hs, const SequenceSizes& seq) {
  const size_t need = cpu::ThreadRows<float>::elements(1, 2 * static_cast<size_t>(Tlen) * hs);
  return need <= seq.qkv && (slots < 4 || need <= std::max(cpu::kBlockElems, seq.out));
}

// Rows [0, n) of dst (stride dst_ld) = head `col` (its first element's column) of the n rows of
// src (stride ld), widened; narrow_head writes such rows back, rounded.
template <typename T>
void widen_head(T* dst, size_t dst_ld, CBuf<T> src, size_t ld, size_t col, int n, int hs) {
  for (size_t t = 0; t < static_cast<size_t>(n); ++t)
    cpu::widen_row(dst + t * dst_ld, src + (t * ld + col), hs);
}
template <typename T>
void narrow_head(Buf<T> dst, size_t ld, size_t col, const T* src, size_t src_ld, int n, int hs) {
  for (size_t t = 0; t < static_cast<size_t>(n); ++t)
    cpu::narrow_row(dst + (t * ld + col), src + t * src_ld, hs);
}

// kv (T rows of [k | v]) = kv head g of the sequence x (rows of QKV elements), widened
template <typename T>
void widen_kv_head(T* kv, CBuf<T> x, size_t QKV, int NH, int NKV, int g, int Tlen, int hs) {
  widen_head(kv, 2 * hs, x, QKV, (NH + g) * hs, Tlen, hs);
  widen_head(kv + hs, 2 * hs, x, QKV, (NH + NKV + g) * hs, Tlen, hs);
}

// One head of sequence b as a block pair (B = NH = NKV = 1): q rows of hs, kv rows of [k | v].
template <typename T>
BlockPair<T> one_head(const T* q, const T* kv, int Tlen, int hs, T scale, const AttentionMask& mask,
                      int b, const Tiles& tiles) {
  const size_t ld = hs;
  return {q,     ld,   kv, 2 * ld, nullptr, nullptr, 1,
          Tlen,  Tlen, 1,  1,      hs,      scale,   mask.from(b, Tlen),
          &tiles};
}

// Whether any of the block API's operands is 2-byte: each is then widened on its own (an fp32 one
// is read in place), so they may differ in storage type (out is an fp32 accumulator, dout not).
template <typename... B>
bool any_half(const B&... bufs) {
  return (static_cast<bool>(bufs.half()) || ...);
}

}  // namespace

size_t cpu_staging_bytes(int B, int Tlen, int NH, int NKV, int hs, bool blocks) {
  const SequenceSizes seq(Tlen, NH, NKV, hs);
  const size_t nb = std::min<size_t>(B, std::max<size_t>(1, cpu::kBlockElems / seq.qkv));
  const size_t tile = std::max(cpu::kBlockElems, cpu::kTileScratchElems);
  // slots A, B, C (a product's tiles): qkv, the keys (in qkv), dqkv (blocks: dout); slot D (the
  // other ops' blocks): dout
  const size_t floats = 2 * std::max(tile, nb * seq.qkv) +
                        std::max(tile, nb * (blocks ? seq.out : seq.qkv)) +
                        std::max(cpu::kBlockElems, blocks ? 0 : nb * seq.out);
  return floats * sizeof(float);
}

template <typename T>
std::string CpuBackend<T>::attention_tiles() const {
  switch (tile_kernel<T>(bf16_gemms())) {
    case TileKernel::Bf16:
      return "bf16 tiles (AVX512-BF16)";
    case TileKernel::Fp32:
      return cpu::fp32_tile_isa() == cpu::Fp32TileIsa::Avx512 ? "fp32 tiles (AVX-512)"
                                                              : "fp32 tiles (AVX2)";
    default:
      return "the BLAS";
  }
}

template <typename T>
void CpuBackend<T>::attention_forward(Buf<T> out, T* lse, CBuf<T> qkv, int B, int Tlen, int NH,
                                      int NKV, int hs, T scale, const AttentionMask& mask) {
  const SequenceSizes seq(Tlen, NH, NKV, hs);
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
  const Tiles tiles = call_tiles<T>(bf16_gemms(), *staging_, Tlen, hs);
  const auto run = [&](T* o, const T* x, int nb, int b0) {
    const BlockPair<T> p{x,     QKV,  x + NH * hs, QKV, nullptr, nullptr, nb,
                         Tlen,  Tlen, NH,          NKV, hs,      scale,   mask.from(b0, Tlen),
                         &tiles};
    block_forward_kernel(o, lse + static_cast<size_t>(b0) * NH * Tlen, p, false);
  };
  if (!cpu::staged(out, qkv)) return run(out.full(), qkv.full(), B, 0);
  const size_t th = static_cast<size_t>(Tlen) * hs, A = static_cast<size_t>(NH) * hs;
  if (per_head_fits(2, Tlen, hs, seq)) {
    // the thread's arrays: [q | o] (T rows of hs each), kv (T rows of [k | v]); a task per
    // (b, h), as the fp32 kernel's, so a GQA group's k and v are widened for each of its heads
    const cpu::ThreadRows<T> qo(*staging_, cpu::kSlotA, 1, 2 * th),
        kvs(*staging_, cpu::kSlotB, 1, 2 * th);
#pragma omp parallel for schedule(static) if (B * NH * th * Tlen > cpu::kParallelWork)
    for (int bh = 0; bh < B * NH; ++bh) {
      const int b = bh / NH, h = bh % NH, g = h / (NH / NKV);
      T *q = qo.row(0, 0), *o = q + th, *kv = kvs.row(0, 0);
      const CBuf<T> x = qkv + static_cast<size_t>(b) * seq.qkv;
      widen_head(q, hs, x, QKV, h * hs, Tlen, hs);
      widen_kv_head(kv, x, QKV, NH, NKV, g, Tlen, hs);
      forward_head(o, lse + static_cast<size_t>(bh) * Tlen,
                   one_head(q, kv, Tlen, hs, scale, mask, b, tiles), 0, 0, false);
      narrow_head(out + static_cast<size_t>(b) * seq.out, A, h * hs, o, hs, Tlen, hs);
    }
    return;
  }
  cpu::for_sequence_blocks(B, seq.qkv, [&](int b0, int nb) {
    T* o = staging_->take<T>(cpu::kSlotC, nb * seq.out);
    run(o, staging_->widened(cpu::kSlotA, qkv + b0 * seq.qkv, nb * seq.qkv), nb, b0);
    cpu::narrow(out + b0 * seq.out, o, nb * seq.out);
  });
}

template <typename T>
void CpuBackend<T>::attention_backward(Buf<T> dqkv, T* scratch, CBuf<T> dout, CBuf<T> qkv,
                                       CBuf<T> out, const T* lse, int B, int Tlen, int NH, int NKV,
                                       int hs, T scale, const AttentionMask& mask) {
  const SequenceSizes seq(Tlen, NH, NKV, hs);
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs;
  // scratch (B, NH, T) = D; dqkv = 0, then the tiles add dq, dk, dv into it
  const Tiles tiles = call_tiles<T>(bf16_gemms(), *staging_, Tlen, hs);
  const auto run = [&](T* d, const T* dy, const T* x, const T* y, int nb, size_t b0) {
    T* D = scratch + b0 * NH * Tlen;
    row_dot_kernel(D, dy, y, nb, Tlen, NH, hs);
    std::fill_n(d, nb * seq.qkv, T(0));
    const BlockPair<T> p{x,     QKV,  x + NH * hs, QKV, nullptr, nullptr, nb,
                         Tlen,  Tlen, NH,          NKV, hs,      scale,   mask.from(b0, Tlen),
                         &tiles};
    block_backward_kernel(d, QKV, d + NH * hs, QKV, dy, lse + b0 * NH * Tlen, D, p);
  };
  if (!cpu::staged(dqkv, dout, qkv, out))
    return run(dqkv.full(), dout.full(), qkv.full(), out.full(), B, 0);
  const size_t th = static_cast<size_t>(Tlen) * hs, A = static_cast<size_t>(NH) * hs;
  if (per_head_fits(4, Tlen, hs, seq)) {
    // the thread's arrays: kv and dkv (T rows of [k | v] each), [q | dq], [dout | out]
    const cpu::ThreadRows<T> kvs(*staging_, cpu::kSlotA, 1, 2 * th),
        dkvs(*staging_, cpu::kSlotB, 1, 2 * th), qdq(*staging_, cpu::kSlotC, 1, 2 * th),
        dyy(*staging_, cpu::kSlotD, 1, 2 * th);
    const int group = NH / NKV;
#pragma omp parallel for schedule(static) if (B * NH * th * Tlen > cpu::kParallelWork)
    for (int bg = 0; bg < B * NKV; ++bg) {
      const int b = bg / NKV, g = bg % NKV;
      T *kv = kvs.row(0, 0), *dkv = dkvs.row(0, 0), *q = qdq.row(0, 0), *dq = q + th;
      T *dy = dyy.row(0, 0), *y = dy + th;
      const CBuf<T> x = qkv + static_cast<size_t>(b) * seq.qkv;
      widen_kv_head(kv, x, QKV, NH, NKV, g, Tlen, hs);
      std::fill_n(dkv, 2 * th, T(0));
      const BlockPair<T> one = one_head(q, kv, Tlen, hs, scale, mask, b, tiles);
      for (int h = g * group; h < (g + 1) * group; ++h) {
        const size_t bh = static_cast<size_t>(b) * NH + h;
        widen_head(q, hs, x, QKV, h * hs, Tlen, hs);
        widen_head(dy, hs, dout + static_cast<size_t>(b) * seq.out, A, h * hs, Tlen, hs);
        widen_head(y, hs, out + static_cast<size_t>(b) * seq.out, A, h * hs, Tlen, hs);
        T* D = scratch + bh * Tlen;
        for (size_t t = 0; t < static_cast<size_t>(Tlen); ++t)
          D[t] = row_dot(dy + t * hs, y + t * hs, hs);
        std::fill_n(dq, th, T(0));
        backward_head(dq, hs, dkv, 2 * static_cast<size_t>(hs), dy, lse + bh * Tlen, D, one, 0, 0);
        narrow_head(dqkv + static_cast<size_t>(b) * seq.qkv, QKV, h * hs, dq, hs, Tlen, hs);
      }
      const Buf<T> d = dqkv + static_cast<size_t>(b) * seq.qkv;
      narrow_head(d, QKV, (NH + g) * hs, dkv, 2 * hs, Tlen, hs);
      narrow_head(d, QKV, (NH + NKV + g) * hs, dkv + hs, 2 * hs, Tlen, hs);
    }
    return;
  }
  cpu::for_sequence_blocks(B, seq.qkv, [&](int b0, int nb) {
    T* d = staging_->take<T>(cpu::kSlotC, nb * seq.qkv);
    run(d, staging_->widened(cpu::kSlotA, dout + b0 * seq.out, nb * seq.out),
        staging_->widened(cpu::kSlotB, qkv + b0 * seq.qkv, nb * seq.qkv),
        staging_->widened(cpu::kSlotD, out + b0 * seq.out, nb * seq.out), nb, b0);
    cpu::narrow(dqkv + b0 * seq.qkv, d, nb * seq.qkv);
  });
}

template <typename T>
void CpuBackend<T>::attention_block_forward(T* out, T* lse, CBuf<T> qkv, CBuf<T> kv, int kv_ld,
                                            const int* qpos, const int* kpos, int B, int Tq, int Tk,
                                            int NH, int NKV, int hs, T scale,
                                            const AttentionMask& mask, bool merge) {
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs, A = static_cast<size_t>(NH) * hs;
  const Tiles tiles = call_tiles<T>(bf16_gemms(), *staging_, Tk, hs);
  const auto run = [&](const T* x, const T* y, int nb, size_t b0) {
    const BlockPair<T> p{x,   QKV, y,     static_cast<size_t>(kv_ld), qpos,  kpos, nb, Tq, Tk, NH,
                         NKV, hs,  scale, mask.from(b0, Tq),          &tiles};
    block_forward_kernel(out + b0 * Tq * A, lse + b0 * NH * Tq, p, merge);
  };
  if (!any_half(qkv, kv)) return run(qkv.full(), kv.full(), B, 0);
  const size_t q_seq = Tq * QKV, kv_seq = static_cast<size_t>(Tk) * kv_ld;
  cpu::for_sequence_blocks(B, std::max(q_seq, kv_seq), [&](int b0, int nb) {
    run(staging_->widened(cpu::kSlotA, qkv + b0 * q_seq, nb * q_seq),
        staging_->widened(cpu::kSlotB, kv + b0 * kv_seq, kv_span(nb, Tk, kv_ld, NKV, hs)), nb, b0);
  });
}

template <typename T>
void CpuBackend<T>::attention_row_dot(T* D, CBuf<T> dout, CBuf<T> out, int B, int Tq, int NH,
                                      int hs) {
  const size_t seq = static_cast<size_t>(Tq) * NH * hs;
  if (!any_half(dout, out)) return row_dot_kernel(D, dout.full(), out.full(), B, Tq, NH, hs);
  cpu::for_sequence_blocks(B, seq, [&](int b0, int nb) {
    row_dot_kernel(D + static_cast<size_t>(b0) * NH * Tq,
                   staging_->widened(cpu::kSlotA, dout + b0 * seq, nb * seq),
                   staging_->widened(cpu::kSlotB, out + b0 * seq, nb * seq), nb, Tq, NH, hs);
  });
}

template <typename T>
void CpuBackend<T>::attention_block_backward(T* dq, T* dkv, CBuf<T> dout, CBuf<T> qkv, CBuf<T> kv,
                                             int kv_ld, const T* lse, const T* D, const int* qpos,
                                             const int* kpos, int B, int Tq, int Tk, int NH,
                                             int NKV, int hs, T scale, const AttentionMask& mask) {
  const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs, A = static_cast<size_t>(NH) * hs;
  const size_t KV = static_cast<size_t>(2) * NKV * hs;
  const Tiles tiles = call_tiles<T>(bf16_gemms(), *staging_, Tk, hs);
  const auto run = [&](const T* dy, const T* x, const T* y, int nb, size_t b0) {
    const BlockPair<T> p{x,   QKV, y,     static_cast<size_t>(kv_ld), qpos,  kpos, nb, Tq, Tk, NH,
                         NKV, hs,  scale, mask.from(b0, Tq),          &tiles};
    block_backward_kernel(dq + b0 * Tq * A, A, dkv + b0 * Tk * KV, KV, dy, lse + b0 * NH * Tq,
                          D + b0 * NH * Tq, p);
  };
  if (!any_half(dout, qkv, kv)) return run(dout.full(), qkv.full(), kv.full(), B, 0);
  const size_t q_seq = Tq * QKV, kv_seq = static_cast<size_t>(Tk) * kv_ld, o_seq = Tq * A;
  cpu::for_sequence_blocks(B, std::max(q_seq, kv_seq), [&](int b0, int nb) {
    run(staging_->widened(cpu::kSlotC, dout + b0 * o_seq, nb * o_seq),
        staging_->widened(cpu::kSlotA, qkv + b0 * q_seq, nb * q_seq),
        staging_->widened(cpu::kSlotB, kv + b0 * kv_seq, kv_span(nb, Tk, kv_ld, NKV, hs)), nb, b0);
  });
}

#define MPITRAIN_INSTANTIATE(T)                                                                    \
  template std::string CpuBackend<T>::attention_tiles() const;                                     \
  template void CpuBackend<T>::attention_forward(Buf<T>, T*, CBuf<T>, int, int, int, int, int, T,  \
                                                 const AttentionMask&);                            \
  template void CpuBackend<T>::attention_backward(Buf<T>, T*, CBuf<T>, CBuf<T>, CBuf<T>, const T*, \
                                                  int, int, int, int, int, T,                      \
                                                  const AttentionMask&);                           \
  template void CpuBackend<T>::attention_block_forward(T*, T*, CBuf<T>, CBuf<T>, int, const int*,  \
                                                       const int*, int, int, int, int, int, int,   \
                                                       T, const AttentionMask&, bool);             \
  template void CpuBackend<T>::attention_row_dot(T*, CBuf<T>, CBuf<T>, int, int, int, int);        \
  template void CpuBackend<T>::attention_block_backward(                                           \
      T*, T*, CBuf<T>, CBuf<T>, CBuf<T>, int, const T*, const T*, const int*, const int*, int,     \
      int, int, int, int, int, T, const AttentionMask&);
MPITRAIN_INSTANTIATE(float)
MPITRAIN_INSTANTIATE(double)
#undef MPITRAIN_INSTANTIATE

}  // namespace mpitrain
