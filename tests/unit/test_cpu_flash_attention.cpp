// The CPU backend's flash attention (issue 35) and its block-pair API (context parallelism):
//   - CpuBackend<double> against a plain double reference (a formula per row, no tiles): the
//     same function, up to double rounding;
//   - CpuBackend<float> against the reference and against the dense kernel it replaced
//     (support/dense_attention.hpp), normwise; the bound is derived below;
//   - the block API over 2 and 3 key blocks in context parallelism's layout (rank r holds chunks
//     r and 2N-1-r of the sequence), merged by log-sum-exp, against the whole sequence;
//   - tile edges of the short and the long tile (cpu_attention_tile), GQA, 2-byte operands (bit
//     for bit against fp32 containers of the same rounded values), the same bits at 1 and 2
//     threads;
//   - bf16 training's tiles (a backend built for bf16 on a CPU with AVX512-BF16), whole and over
//     the ring, against the reference on the same bf16 values;
//   - a sliding window (Shape::window) of every length against a tile, whole and over the ring;
//   - document masking (Shape::docs): documents of every length against a tile, with and
//     without a window, whole and over the ring.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "dense_attention.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain {
namespace {

using DVec = std::vector<double>;
using IVec = std::vector<int>;

struct Shape {
  int B, NH, NKV, hs;
  int window = 0;  // attention_sees's: 0, none
  IVec docs = {};  // (B, T) each position's document start, of the whole sequence; empty: none
  // query row (b, i) at qpos: its document's first position
  int doc_start(int b, int qpos) const {
    return docs.empty() ? 0 : docs[size_t(b) * (docs.size() / B) + qpos];
  }
  // the mask of the query rows qpos (the whole sequence, or one rank's chunks); starts: their
  // document starts, (B, qpos.size()), kept alive by the caller
  AttentionMask mask(const IVec& qpos, IVec& starts) const {
    if (docs.empty()) return AttentionMask(window);
    starts.clear();
    for (int b = 0; b < B; ++b)
      for (int q : qpos) starts.push_back(doc_start(b, q));
    return AttentionMask(window, starts.data());
  }
  int QKV() const { return (NH + 2 * NKV) * hs; }
  int A() const { return NH * hs; }
  int KV() const { return 2 * NKV * hs; }
  double scale() const { return 1 / std::sqrt(double(hs)); }
};

DVec random_values(size_t n, uint64_t seed, double lo = -1.5, double hi = 1.5) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  DVec v(n);
  for (double& x : v) x = dist(gen);
  return v;
}

IVec iota(int n, int from = 0) {
  IVec v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

// Attention of the query rows q (B, Tq, QKV: q heads first) against keys kv (B, Tk, kv_ld: k
// heads then v heads), query i seeing key j iff kpos[j] <= qpos[i], with a window W
// kpos[j] > qpos[i] - W, and with documents kpos[j] >= its document's start (written out here,
// not attention_sees), in double, row by row:
// out, lse; and for dout: dq (B, Tq, A), dkv (B, Tk, KV) of sum(out * dout).
struct Reference {
  DVec out, lse, dq, dkv;
};
Reference reference(const DVec& q, const DVec& kv, int kv_ld, const IVec& qpos, const IVec& kpos,
                    const DVec& dout, Shape s) {
  const int Tq = static_cast<int>(qpos.size()), Tk = static_cast<int>(kpos.size());
  const int group = s.NH / s.NKV, hs = s.hs;
  Reference r{DVec(size_t(s.B) * Tq * s.A()), DVec(size_t(s.B) * s.NH * Tq),
              DVec(size_t(s.B) * Tq * s.A()), DVec(size_t(s.B) * Tk * s.KV())};
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.NH; ++h)
      for (int i = 0; i < Tq; ++i) {
        const int g = h / group;
        const double* qi = &q[(size_t(b) * Tq + i) * s.QKV() + h * hs];
        const double* dy = &dout[(size_t(b) * Tq + i) * s.A() + h * hs];
        const auto k = [&](int j) { return &kv[(size_t(b) * Tk + j) * kv_ld + g * hs]; };
        const auto v = [&](int j) { return &kv[(size_t(b) * Tk + j) * kv_ld + (s.NKV + g) * hs]; };
        DVec sc(Tk, -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < Tk; ++j)
          if (kpos[j] <= qpos[i] && (s.window == 0 || kpos[j] > qpos[i] - s.window) &&
              kpos[j] >= s.doc_start(b, qpos[i])) {
            double d = 0;
            for (int c = 0; c < hs; ++c) d += qi[c] * k(j)[c];
            sc[j] = d * s.scale();
            mx = std::max(mx, sc[j]);
          }
        double* o = &r.out[(size_t(b) * Tq + i) * s.A() + h * hs];
        double& lse = r.lse[(size_t(b) * s.NH + h) * Tq + i];
        if (mx == -std::numeric_limits<double>::infinity()) {
          lse = mx;
          continue;
        }
        double z = 0;
        for (int j = 0; j < Tk; ++j) z += std::exp(sc[j] - mx);
        lse = mx + std::log(z);
        DVec p(Tk), dp(Tk);
        double D = 0;
        for (int j = 0; j < Tk; ++j) {
          p[j] = std::exp(sc[j] - lse);
          for (int c = 0; c < hs; ++c) {
            o[c] += p[j] * v(j)[c];
            dp[j] += dy[c] * v(j)[c];
          }
          D += p[j] * dp[j];
        }
        double* dq = &r.dq[(size_t(b) * Tq + i) * s.A() + h * hs];
        for (int j = 0; j < Tk; ++j) {
          double* dk = &r.dkv[(size_t(b) * Tk + j) * s.KV() + g * hs];
          double* dv = dk + s.NKV * hs;
          const double ds = p[j] * (dp[j] - D) * s.scale();
          for (int c = 0; c < hs; ++c) {
            dv[c] += p[j] * dy[c];
            dq[c] += ds * k(j)[c];
            dk[c] += ds * qi[c];
          }
        }
      }
  return r;
}

// max |a - b| / max |b| (0 for an all-zero b equal to a); -inf entries must agree exactly.
template <class V>
double rel_err(const V& a, const DVec& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    if (std::isinf(b[i])) {
      if (double(a[i]) != b[i]) return std::numeric_limits<double>::infinity();
      continue;
    }
    num = std::max(num, std::abs(double(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return den > 0 ? num / den : num;
}

template <typename T>
std::vector<T> as(const DVec& v) {
  return std::vector<T>(v.begin(), v.end());
}

// The rows of x (rows of width w) at the given row indices of each of B sequences of n rows.
DVec gather_rows(const DVec& x, int B, int n, int w, const IVec& rows, int c0 = 0, int c1 = -1) {
  if (c1 < 0) c1 = w;
  DVec out;
  for (int b = 0; b < B; ++b)
    for (int r : rows)
      for (int c = c0; c < c1; ++c) out.push_back(x[(size_t(b) * n + r) * w + c]);
  return out;
}

// ---- the whole sequence -------------------------------------------------------------------

// attention_forward / attention_backward of backend T on qkv (B, Tlen, QKV) for dout.
template <typename T>
struct Whole {
  std::vector<T> out, lse, dqkv;
};
template <typename T>
Whole<T> whole(CpuBackend<T>& be, const DVec& qkv, const DVec& dout, int Tlen, Shape s) {
  const size_t S = be.attention_state_size(s.B, Tlen, s.NH);
  EXPECT_EQ(S, size_t(s.B) * s.NH * Tlen) << "the state is one log-sum-exp per row";
  std::vector<T> x = as<T>(qkv), dy = as<T>(dout), scratch(S, T(7));
  Whole<T> w{std::vector<T>(size_t(s.B) * Tlen * s.A(), T(3)), std::vector<T>(S),
             std::vector<T>(qkv.size(), T(5))};  // out and dqkv overwritten
  IVec starts;
  const AttentionMask mask = s.mask(iota(Tlen), starts);
  be.attention_forward(w.out.data(), w.lse.data(), x.data(), s.B, Tlen, s.NH, s.NKV, s.hs,
                       T(s.scale()), mask);
  be.attention_backward(w.dqkv.data(), scratch.data(), dy.data(), x.data(), w.out.data(),
                        w.lse.data(), s.B, Tlen, s.NH, s.NKV, s.hs, T(s.scale()), mask);
  return w;
}

// The reference's dq and dkv laid out as dqkv (B, T, QKV).
DVec reference_dqkv(const Reference& r, int Tlen, Shape s) {
  DVec d(size_t(s.B) * Tlen * s.QKV());
  for (size_t row = 0; row < size_t(s.B) * Tlen; ++row) {
    std::copy_n(&r.dq[row * s.A()], s.A(), &d[row * s.QKV()]);
    std::copy_n(&r.dkv[row * s.KV()], s.KV(), &d[row * s.QKV() + s.A()]);
  }
  return d;
}

Reference whole_reference(const DVec& qkv, const DVec& dout, int Tlen, Shape s) {
  const DVec kv = gather_rows(qkv, s.B, Tlen, s.QKV(), iota(Tlen), s.A(), s.QKV());
  return reference(qkv, kv, s.KV(), iota(Tlen), iota(Tlen), dout, s);
}

// whole() of be on random qkv and dout (from seed) against the reference: out, lse and dqkv
// within tol.
template <typename T>
void check_whole(CpuBackend<T>& be, int Tlen, Shape s, uint64_t seed, double tol) {
  const DVec qkv = random_values(size_t(s.B) * Tlen * s.QKV(), seed);
  const DVec dout = random_values(size_t(s.B) * Tlen * s.A(), seed + 1, -1, 1);
  const Reference r = whole_reference(qkv, dout, Tlen, s);
  const Whole<T> w = whole(be, qkv, dout, Tlen, s);
  SCOPED_TRACE("T " + std::to_string(Tlen) + " window " + std::to_string(s.window) +
               (s.docs.empty() ? "" : " with documents"));
  EXPECT_LT(rel_err(w.out, r.out), tol);
  EXPECT_LT(rel_err(w.lse, r.lse), tol);
  EXPECT_LT(rel_err(w.dqkv, reference_dqkv(r, Tlen, s)), tol);
}

// The edges of both tiles: the short one's, the last length on it, the first on the long tile
// (a whole number of its tiles) and lengths one past and one short of a long tile.
constexpr int kShort = kAttentionTileShort, kLong = kAttentionTileLong;
constexpr int kFirstLong = kAttentionLongKeys;
const int kEdgeLengths[] = {1,   kShort - 1, kShort,         kShort + 1,
                            255, kFirstLong - 1, kFirstLong, kFirstLong + 1,
                            kFirstLong + kLong - 1};
static_assert(kFirstLong % kLong == 0, "the first long length is a whole number of tiles");

// Double: the tiles and the online softmax are the same function as the reference's rows.
// Measured: out 6e-16, lse 3e-16, dqkv 3.6e-15; tolerance 2e-14.
TEST(CpuFlashAttention, DoubleEqualsTheReferenceAtTileEdges) {
  CpuBackend<double> be(2);
  for (const Shape& s : {Shape{2, 4, 2, 8}, Shape{1, 3, 3, 5}, Shape{1, 4, 1, 4}})
    for (int Tlen : kEdgeLengths) {
      const DVec qkv = random_values(size_t(s.B) * Tlen * s.QKV(), 1 + Tlen);
      const DVec dout = random_values(size_t(s.B) * Tlen * s.A(), 2 + Tlen, -1, 1);
      const Reference r = whole_reference(qkv, dout, Tlen, s);
      const Whole<double> w = whole(be, qkv, dout, Tlen, s);
      SCOPED_TRACE("T " + std::to_string(Tlen) + " NH " + std::to_string(s.NH) + " NKV " +
                   std::to_string(s.NKV));
      EXPECT_LT(rel_err(w.out, r.out), 2e-14);
      EXPECT_LT(rel_err(w.lse, r.lse), 2e-14);
      EXPECT_LT(rel_err(w.dqkv, reference_dqkv(r, Tlen, s)), 2e-14);
    }
}

// Float against the double reference, normwise. An output is a sum over at most T keys of
// products of hs terms: each fp32 sum adds at most one rounding (2^-24) per term, relative to the
// sum of |terms| (within a small factor of the largest output for these O(1) inputs), so the
// bound is ~2 (T + hs + 16) 2^-24, ~4e-5 at T 255, hs 32 (exp_fast's ~2 ulp among the 16); for
// random data the roundings mostly cancel. Measured (worst over the shapes, the fp32 tiles or the
// BLAS alike): out 2.2e-7, lse 1.9e-7, dqkv 3.5e-7; flash vs the dense kernel it replaced: out
// 2.6e-7, dqkv 8.8e-7 (hs 40). Tolerance 2e-6.
TEST(CpuFlashAttention, FloatMatchesTheReferenceAndTheDenseKernel) {
  CpuBackend<float> be(2);
  SCOPED_TRACE("tiles: " + be.attention_tiles());
  // hs 40: the fp32 tiles' products over hs (P v, dS k, P^T dout, dS^T q) end in a part vector
  for (const Shape& s : {Shape{2, 4, 2, 16}, Shape{2, 2, 2, 32}, Shape{1, 2, 1, 40}})
    for (int Tlen : kEdgeLengths) {
      const DVec qkv = random_values(size_t(s.B) * Tlen * s.QKV(), 11 + Tlen);
      const DVec dout = random_values(size_t(s.B) * Tlen * s.A(), 12 + Tlen, -1, 1);
      const Reference r = whole_reference(qkv, dout, Tlen, s);
      const DVec dqkv_ref = reference_dqkv(r, Tlen, s);
      const Whole<float> w = whole(be, qkv, dout, Tlen, s);
      // the dense kernel on the same inputs
      std::vector<float> x = as<float>(qkv), dy = as<float>(dout), out(w.out.size()),
                         probs(size_t(s.B) * s.NH * Tlen * Tlen), scratch(probs.size()),
                         dqkv(qkv.size());
      testing::dense_attention_forward(out.data(), probs.data(), x.data(), s.B, Tlen, s.NH, s.NKV,
                                       s.hs, float(s.scale()), true);
      testing::dense_attention_backward(dqkv.data(), scratch.data(), dy.data(), x.data(),
                                        probs.data(), s.B, Tlen, s.NH, s.NKV, s.hs,
                                        float(s.scale()), true);
      SCOPED_TRACE("T " + std::to_string(Tlen) + " NH " + std::to_string(s.NH) + " NKV " +
                   std::to_string(s.NKV) + " hs " + std::to_string(s.hs));
      EXPECT_LT(rel_err(w.out, r.out), 2e-6);
      EXPECT_LT(rel_err(w.lse, r.lse), 2e-6);
      EXPECT_LT(rel_err(w.dqkv, dqkv_ref), 2e-6);
      EXPECT_LT(rel_err(out, r.out), 2e-6) << "the dense kernel";
      EXPECT_LT(rel_err(dqkv, dqkv_ref), 2e-6) << "the dense kernel";
      EXPECT_LT(rel_err(w.out, DVec(out.begin(), out.end())), 2e-6) << "flash vs dense";
      EXPECT_LT(rel_err(w.dqkv, DVec(dqkv.begin(), dqkv.end())), 2e-6) << "flash vs dense";
    }
}

// Long sequences at hs 64 (the long tile): at T 2500 a head's 20 key tiles fit the kept packs in
// forward (k^T) but not in backward (k^T and v^T), which packs each key tile again for every
// query tile; both fit the threads' regions, sized for the larger (a forward that kept its packs
// overran a region sized for backward here once). Measured against the double reference (Zen 5, the
// fp32 tiles and the BLAS alike): out 1.8e-7, lse 1.1e-7, dqkv 3.4e-7; tolerance 2e-6, as above.
TEST(CpuFlashAttention, FloatLongSequencesAtHeadSize64) {
  CpuBackend<float> be(2);
  const Shape s{1, 2, 1, 64};
  for (const int Tlen : {kAttentionLongKeys + 1, 2500}) {
    const DVec qkv = random_values(size_t(s.B) * Tlen * s.QKV(), 51);
    const DVec dout = random_values(size_t(s.B) * Tlen * s.A(), 52, -1, 1);
    const Reference r = whole_reference(qkv, dout, Tlen, s);
    const Whole<float> w = whole(be, qkv, dout, Tlen, s);
    SCOPED_TRACE("T " + std::to_string(Tlen) + ", tiles: " + be.attention_tiles());
    EXPECT_LT(rel_err(w.out, r.out), 2e-6);
    EXPECT_LT(rel_err(w.lse, r.lse), 2e-6);
    EXPECT_LT(rel_err(w.dqkv, reference_dqkv(r, Tlen, s)), 2e-6);
  }
}

// Each output has one writer and the tiles go in a fixed order: the same bits at 1 and 2 threads.
TEST(CpuFlashAttention, SameBitsAtOneAndTwoThreads) {
  const Shape s{2, 4, 2, 16};
  for (const int Tlen : {200, kAttentionLongKeys + 40}) {  // the short tile and the long one
    SCOPED_TRACE("T " + std::to_string(Tlen));
    const DVec qkv = random_values(size_t(s.B) * Tlen * s.QKV(), 21);
    const DVec dout = random_values(size_t(s.B) * Tlen * s.A(), 22, -1, 1);
    CpuBackend<float> one(1);
    const Whole<float> a = whole(one, qkv, dout, Tlen, s);
    CpuBackend<float> two(2);
    const Whole<float> b = whole(two, qkv, dout, Tlen, s);
    EXPECT_EQ(0, std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(a.dqkv.data(), b.dqkv.data(), a.dqkv.size() * sizeof(float)));
  }
}

// ---- the block-pair API in context parallelism's layout ------------------------------------

// Rank r of N: chunks r and 2N-1-r of a sequence of 2N chunks of c rows.
IVec cp_positions(int r, int N, int c) {
  IVec p = iota(c, r * c), hi = iota(c, (2 * N - 1 - r) * c);
  p.insert(p.end(), hi.begin(), hi.end());
  return p;
}

// x rounded to bf16 where `products` is Bf16 (the trainer's operands are bf16 values).
DVec operands(DVec x, Precision products) {
  if (products == Precision::Bf16)
    for (double& v : x) v = round_to(float(v), Precision::Bf16);
  return x;
}

// Rank r's attention as the ring computes it: its own keys first (kv inside its qkv), then each
// other rank's packed kv block in ring order, merged; then the backward of every block pair with
// the final lse. Checked against the whole sequence's reference restricted to rank r's rows. The
// backend's products are `products` (Bf16: bf16 tiles where the CPU has them).
template <typename T>
void check_ring(int N, int r, int c, Shape s, double tol, Precision products = Precision::Fp32) {
  const int Tlen = 2 * N * c, Tq = 2 * c;
  const DVec qkv = operands(random_values(size_t(s.B) * Tlen * s.QKV(), 31 + r), products);
  const DVec dout = operands(random_values(size_t(s.B) * Tlen * s.A(), 32 + r, -1, 1), products);
  const Reference whole = whole_reference(qkv, dout, Tlen, s);  // every query, every key
  const IVec qpos = cp_positions(r, N, c);
  // the reference of rank r's queries against all keys: its dq rows, and dk dv of all keys from
  // rank r's queries only (what the ring returns to each key's owner)
  const DVec q_local = gather_rows(qkv, s.B, Tlen, s.QKV(), qpos);
  const DVec dy_local = gather_rows(dout, s.B, Tlen, s.A(), qpos);
  const Reference ref = reference(q_local, gather_rows(qkv, s.B, Tlen, s.QKV(), iota(Tlen), s.A(),
                                                       s.QKV()),
                                  s.KV(), qpos, iota(Tlen), dy_local, s);
  EXPECT_LT(rel_err(ref.out, gather_rows(whole.out, s.B, Tlen, s.A(), qpos)), 1e-14);

  CpuBackend<T> be(2, products);
  const std::vector<T> x = as<T>(q_local), dy = as<T>(dy_local);
  IVec starts;
  const AttentionMask mask = s.mask(qpos, starts);
  std::vector<T> out(size_t(s.B) * Tq * s.A(), T(9)), lse(size_t(s.B) * s.NH * Tq, T(9));
  std::vector<std::vector<T>> packed(N);  // each other rank's kv (B, Tq, KV)
  for (int step = 0; step < N; ++step) {
    const int src = (r - step + N) % N;  // ring order: own keys, then r-1, r-2, ...
    const IVec kpos = cp_positions(src, N, c);
    if (src == r) {
      be.attention_block_forward(out.data(), lse.data(), x.data(), x.data() + s.A(), s.QKV(),
                                 qpos.data(), kpos.data(), s.B, Tq, Tq, s.NH, s.NKV, s.hs,
                                 T(s.scale()), mask, false);
    } else {
      packed[src] = as<T>(gather_rows(qkv, s.B, Tlen, s.QKV(), kpos, s.A(), s.QKV()));
      be.attention_block_forward(out.data(), lse.data(), x.data(), packed[src].data(), s.KV(),
                                 qpos.data(), kpos.data(), s.B, Tq, Tq, s.NH, s.NKV, s.hs,
                                 T(s.scale()), mask, true);
    }
  }
  SCOPED_TRACE("N " + std::to_string(N) + " rank " + std::to_string(r) + " chunk " +
               std::to_string(c) + " window " + std::to_string(s.window) +
               (s.docs.empty() ? "" : " with documents"));
  EXPECT_LT(rel_err(out, ref.out), tol) << "merged out";
  EXPECT_LT(rel_err(lse, ref.lse), tol) << "merged lse";

  std::vector<T> D(lse.size(), T(9)), dq(out.size(), T(0));
  be.attention_row_dot(D.data(), dy.data(), out.data(), s.B, Tq, s.NH, s.hs);
  for (int src = 0; src < N; ++src) {
    const IVec kpos = cp_positions(src, N, c);
    std::vector<T> dkv(size_t(s.B) * Tq * s.KV(), T(0));
    const T* kv = src == r ? x.data() + s.A() : packed[src].data();
    be.attention_block_backward(dq.data(), dkv.data(), dy.data(), x.data(), kv,
                                src == r ? s.QKV() : s.KV(), lse.data(), D.data(), qpos.data(),
                                kpos.data(), s.B, Tq, Tq, s.NH, s.NKV, s.hs, T(s.scale()), mask);
    EXPECT_LT(rel_err(dkv, gather_rows(ref.dkv, s.B, Tlen, s.KV(), kpos)), tol)
        << "dk dv of rank " << src << "'s keys";
  }
  EXPECT_LT(rel_err(dq, ref.dq), tol) << "dq";
}

// Double: the same function up to rounding (measured: out 1.1e-15, lse 3e-16, dq 1.1e-15, dkv 1.4e-15).
TEST(CpuFlashAttention, BlocksMergedOverTheRingEqualTheWholeSequence) {
  for (int N : {2, 3})
    for (int r : {0, N - 1})
      for (int c : {5, 40})  // c 40: a tile holds rows of both chunks
        check_ring<double>(N, r, c, Shape{2, 4, 2, 8}, 2e-14);
  check_ring<double>(2, 1, 33, Shape{1, 2, 1, 6}, 2e-14);  // multi-query
  // blocks of 2 c >= kAttentionLongKeys keys: the long tile, one holding rows of both chunks
  check_ring<double>(2, 0, kAttentionLongKeys / 2 + 20, Shape{1, 2, 1, 8}, 2e-14);
}

// Float: the bound of the whole sequence (measured: out 2.7e-7, lse 7.7e-8, dq 3.3e-7, dkv 3.1e-7).
TEST(CpuFlashAttention, FloatBlocksMergedOverTheRing) {
  check_ring<float>(3, 1, 40, Shape{2, 4, 2, 16}, 2e-6);
}

// bf16 training's tiles: q, k, v and dout bf16 values, P and dS rounded to bf16 (2^-9 relative
// each) for their products, fp32 sums. An output moves by at most 2^-9 of the sum of its terms'
// magnitudes for each rounded operand behind it (out: P; dv: P; dq, dk: dS, whose own inputs
// carry P's); with these O(1) inputs those sums are within a small factor of the largest output,
// and the roundings' signs are random. Measured (AMD EPYC Zen 5): whole out 9.6e-4 to 1.5e-3,
// lse 8.4e-8 to 9.8e-8, dqkv 1.27e-3 to 1.42e-3; over the ring out 1.8e-3, lse 8.8e-8, dq
// 2.2e-3, dkv 1.6e-3 to 2.0e-3. Tolerance 6e-3 (3 2^-9: dq and dk's two rounded operands and
// the third behind their inputs).
TEST(CpuFlashAttention, Bf16TilesWholeAndOverTheRing) {
  CpuBackend<float> be(2, Precision::Bf16);
  if (!be.bf16_gemms()) GTEST_SKIP() << "this CPU has no bf16 instructions: fp32 tiles instead";
  const double tol = 6e-3;
  for (const int Tlen : {40, 257, kAttentionLongKeys + 1}) {  // the short tile, the long one
    const Shape s{2, 4, 2, 16};
    const DVec qkv = operands(random_values(size_t(s.B) * Tlen * s.QKV(), 21), Precision::Bf16);
    const DVec dout =
        operands(random_values(size_t(s.B) * Tlen * s.A(), 22, -1, 1), Precision::Bf16);
    const Reference ref = whole_reference(qkv, dout, Tlen, s);
    const Whole<float> w = whole(be, qkv, dout, Tlen, s);
    SCOPED_TRACE("T " + std::to_string(Tlen));
    EXPECT_LT(rel_err(w.out, ref.out), tol);
    EXPECT_LT(rel_err(w.lse, ref.lse), tol);
    EXPECT_LT(rel_err(w.dqkv, reference_dqkv(ref, Tlen, s)), tol);
  }
  check_ring<float>(3, 1, 40, Shape{2, 4, 2, 16}, tol, Precision::Bf16);
}

// A sliding window (Mistral's): each query sees its W latest keys, itself included. W cuts the
// tiles every way: itself only (1), inside one tile, a tile's length, across two tiles, T - 1; at
// T and beyond it masks nothing. Double: the reference up to rounding (measured, AMD EPYC Zen 5:
// out 4.8e-16, lse 4.9e-16, dqkv 2.9e-15; over the ring out 1.1e-15, lse 3.7e-16, dq 1.1e-15, dkv
// 1.4e-15; tolerance 2e-14). Over the ring, a window shorter than a chunk (some blocks wholly out
// of it), longer than one, and past the whole sequence.
TEST(CpuFlashAttention, SlidingWindowEqualsTheReference) {
  CpuBackend<double> be(2);
  for (const int Tlen : {kShort * 3 + 5, kFirstLong + kLong / 2})  // the short tile, the long one
    for (const int W : {1, 7, kShort, kShort + 3, kLong + 9, Tlen - 1, Tlen, Tlen + 5})
      check_whole(be, Tlen, Shape{2, 4, 2, 8, W}, 61 + W, 2e-14);
  for (const int W : {9, 57, 300})  // chunks of 40, the sequence 240
    for (int r : {0, 2}) check_ring<double>(3, r, 40, Shape{2, 4, 2, 8, W}, 2e-14);
}

// Float (the fp32 tiles or the BLAS; with bf16 products, bf16 tiles where the CPU has them): the
// bounds of the causal tests above (measured, AMD EPYC Zen 5, fp32 tiles: out 1.8e-7, lse 1.1e-7,
// dqkv 2.7e-7; over the ring out 2.1e-7, lse 9.6e-8, dq 3.5e-7, dkv 3.0e-7; bf16 tiles over the
// ring: out 1.7e-3, dq 2.9e-3, dkv 2.6e-3).
TEST(CpuFlashAttention, FloatSlidingWindowWholeAndOverTheRing) {
  CpuBackend<float> be(2);
  SCOPED_TRACE("tiles: " + be.attention_tiles());
  for (const int Tlen : {257, kFirstLong + 40})
    for (const int W : {20, 200}) check_whole(be, Tlen, Shape{1, 4, 2, 32, W}, 71 + W, 2e-6);
  check_ring<float>(3, 1, 40, Shape{2, 4, 2, 16, 50}, 2e-6);
  if (CpuBackend<float>(2, Precision::Bf16).bf16_gemms())
    check_ring<float>(3, 1, 40, Shape{2, 4, 2, 16, 50}, 6e-3, Precision::Bf16);
}

// (B, T) document starts: a document begins at 0 and wherever `begins(b, t)` says.
template <class F>
IVec documents(int B, int Tlen, F&& begins) {
  IVec d(size_t(B) * Tlen);
  for (int b = 0; b < B; ++b)
    for (int t = 0, start = 0; t < Tlen; ++t) {
      if (t > 0 && begins(b, t)) start = t;
      d[size_t(b) * Tlen + t] = start;
    }
  return d;
}
// Documents of random lengths, a new one at each position with probability p (other cuts in
// each sequence).
IVec random_documents(int B, int Tlen, double p, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::bernoulli_distribution cut(p);
  return documents(B, Tlen, [&](int, int) { return cut(gen); });
}

// Document masking: a query sees no key before its document's start. The documents cut the tiles
// every way: random lengths (many one or two tokens long at p 0.4), documents of a short tile
// each (their edges on the tiles'), of a tile and 3, and one token each; with no window, a window
// shorter than most documents, and one longer than a tile. Double: the reference up to rounding
// (measured, AMD EPYC Zen 5: out 5.9e-16, lse 3.2e-16, dqkv 1.0e-15; over the ring out 3.7e-16,
// lse 3.8e-16, dq 3.3e-16, dkv 9.7e-16; tolerance 2e-14). Over the ring, documents that cross
// the chunks.
TEST(CpuFlashAttention, DocumentMaskEqualsTheReference) {
  CpuBackend<double> be(2);
  for (const int Tlen : {kShort * 3 + 5, kFirstLong + kLong / 2}) {  // the short tile, the long
    const std::vector<IVec> cases = {
        random_documents(2, Tlen, 0.03, 81), random_documents(2, Tlen, 0.4, 82),
        documents(2, Tlen, [](int, int t) { return t % kShort == 0; }),
        documents(2, Tlen, [](int b, int t) { return t % (kShort + 3) == b; }),
        documents(2, Tlen, [](int, int) { return true; })};
    for (size_t k = 0; k < cases.size(); ++k)
      for (const int W : {0, 7, kLong + 9}) {
        SCOPED_TRACE("documents " + std::to_string(k));
        check_whole(be, Tlen, Shape{2, 4, 2, 8, W, cases[k]}, 91 + W + k, 2e-14);
      }
  }
  for (const int W : {0, 57})  // chunks of 40, the sequence 240
    for (int r : {0, 2})
      check_ring<double>(3, r, 40, Shape{2, 4, 2, 8, W, random_documents(2, 240, 0.02, 83)}, 2e-14);
}

// Float (the fp32 tiles or the BLAS; with bf16 products, bf16 tiles where the CPU has them): the
// bounds of the causal tests above (measured, AMD EPYC Zen 5, fp32 tiles: out 2.6e-7, lse 1.2e-7,
// dqkv 3.5e-7; over the ring out 1.9e-7, lse 8.2e-8, dq 4.0e-7, dkv 2.3e-7; bf16 tiles over the
// ring: out 1.0e-3, dq 3.1e-3, dkv 2.4e-3).
TEST(CpuFlashAttention, FloatDocumentMaskWholeAndOverTheRing) {
  CpuBackend<float> be(2);
  SCOPED_TRACE("tiles: " + be.attention_tiles());
  for (const int Tlen : {257, kFirstLong + 40})
    for (const int W : {0, 50})
      check_whole(be, Tlen, Shape{2, 4, 2, 32, W, random_documents(2, Tlen, 0.01, 84)}, 85 + W,
                  2e-6);
  const Shape s{2, 4, 2, 16, 0, random_documents(2, 240, 0.02, 86)};
  check_ring<float>(3, 1, 40, s, 2e-6);
  if (CpuBackend<float>(2, Precision::Bf16).bf16_gemms())
    check_ring<float>(3, 1, 40, s, 6e-3, Precision::Bf16);
}

// A row that sees no key of a block: lse -inf and out 0, and a merge with such a block leaves
// (out, lse) as they were; a row that has seen nothing yet takes the next block's result.
TEST(CpuFlashAttention, RowsThatSeeNoKey) {
  CpuBackend<double> be(1);
  const Shape s{1, 2, 1, 4};
  const DVec qkv = random_values(size_t(s.B) * 4 * s.QKV(), 41);
  const IVec qpos{0, 1, 2, 3}, late{2, 3, 4, 5}, early{0, 0, 1, 1};
  std::vector<double> out(4 * s.A(), 9), lse(s.NH * 4, 9);
  const double* kv = qkv.data() + s.A();
  be.attention_block_forward(out.data(), lse.data(), qkv.data(), kv, s.QKV(), qpos.data(),
                             late.data(), 1, 4, 4, s.NH, s.NKV, s.hs, s.scale(), 0, false);
  for (int h = 0; h < s.NH; ++h)
    for (int t : {0, 1}) EXPECT_EQ(lse[h * 4 + t], -std::numeric_limits<double>::infinity());
  for (int t : {0, 1})
    for (int i = 0; i < s.A(); ++i) EXPECT_EQ(out[t * s.A() + i], 0.0);
  const std::vector<double> out1 = out, lse1 = lse;
  // the early keys merged in: equal to them alone for rows 0, 1; a proper merge for 2, 3
  be.attention_block_forward(out.data(), lse.data(), qkv.data(), kv, s.QKV(), qpos.data(),
                             early.data(), 1, 4, 4, s.NH, s.NKV, s.hs, s.scale(), 0, true);
  std::vector<double> alone(out.size()), lse_alone(lse.size());
  be.attention_block_forward(alone.data(), lse_alone.data(), qkv.data(), kv, s.QKV(), qpos.data(),
                             early.data(), 1, 4, 4, s.NH, s.NKV, s.hs, s.scale(), 0, false);
  for (int h = 0; h < s.NH; ++h)
    for (int t : {0, 1}) EXPECT_NEAR(lse[h * 4 + t], lse_alone[h * 4 + t], 1e-15);
  for (int t : {0, 1})
    for (int i = 0; i < s.A(); ++i) EXPECT_NEAR(out[t * s.A() + i], alone[t * s.A() + i], 1e-15);
  // a block no row sees changes nothing
  const std::vector<double> out2 = out, lse2 = lse;
  const IVec never{9, 9, 9, 9};
  be.attention_block_forward(out.data(), lse.data(), qkv.data(), kv, s.QKV(), qpos.data(),
                             never.data(), 1, 4, 4, s.NH, s.NKV, s.hs, s.scale(), 0, true);
  EXPECT_EQ(out, out2);
  EXPECT_EQ(lse, lse2);
}

// 2-byte operands (bf16 bits) give the bits of fp32 containers holding the same rounded values:
// the block API widens them (a packed block and a kv inside qkv, several sequences per staged
// block and one larger than a block).
TEST(CpuFlashAttention, BlockApiOnTwoByteOperandsEqualsFp32Containers) {
  for (const int c : {8, 700}) {
    const Shape s{c == 8 ? 3 : 1, 4, 2, 32};
    const int N = 2, Tlen = 2 * N * c, Tq = 2 * c;
    const IVec qpos = cp_positions(1, N, c), kpos = cp_positions(0, N, c);
    DVec qkv = random_values(size_t(s.B) * Tlen * s.QKV(), 51);
    DVec dout = random_values(size_t(s.B) * Tq * s.A(), 52, -1, 1);
    for (double& v : qkv) v = round_to(float(v), Precision::Bf16);
    for (double& v : dout) v = round_to(float(v), Precision::Bf16);
    const DVec x = gather_rows(qkv, s.B, Tlen, s.QKV(), qpos);
    const DVec kv = gather_rows(qkv, s.B, Tlen, s.QKV(), kpos, s.A(), s.QKV());
    const auto bits = [](const DVec& v) {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = to_bf16_bits(float(v[i]));
      return h;
    };
    const std::vector<uint16_t> xh = bits(x), kvh = bits(kv), dyh = bits(dout);
    const std::vector<float> xf = as<float>(x), kvf = as<float>(kv), dyf = as<float>(dout);
    CpuBackend<float> be(2);
    const auto run = [&](CBuf<float> q, CBuf<float> own, CBuf<float> other, CBuf<float> dy) {
      std::vector<float> out(size_t(s.B) * Tq * s.A()), lse(size_t(s.B) * s.NH * Tq),
          D(lse.size()), dq(out.size()), dkv(size_t(s.B) * Tq * s.KV()), dkv2(dkv.size());
      be.attention_block_forward(out.data(), lse.data(), q, own, s.QKV(), qpos.data(), qpos.data(),
                                 s.B, Tq, Tq, s.NH, s.NKV, s.hs, float(s.scale()), 0, false);
      be.attention_block_forward(out.data(), lse.data(), q, other, s.KV(), qpos.data(), kpos.data(),
                                 s.B, Tq, Tq, s.NH, s.NKV, s.hs, float(s.scale()), 0, true);
      be.attention_row_dot(D.data(), dy, CBuf<float>(out.data()), s.B, Tq, s.NH, s.hs);
      be.attention_block_backward(dq.data(), dkv.data(), dy, q, own, s.QKV(), lse.data(), D.data(),
                                  qpos.data(), qpos.data(), s.B, Tq, Tq, s.NH, s.NKV, s.hs,
                                  float(s.scale()), 0);
      be.attention_block_backward(dq.data(), dkv2.data(), dy, q, other, s.KV(), lse.data(),
                                  D.data(), qpos.data(), kpos.data(), s.B, Tq, Tq, s.NH, s.NKV,
                                  s.hs, float(s.scale()), 0);
      std::vector<float> all = out;
      for (const auto* v : {&lse, &D, &dq, &dkv, &dkv2}) all.insert(all.end(), v->begin(), v->end());
      return all;
    };
    const auto half = [](const std::vector<uint16_t>& h, size_t at = 0) {
      return CBuf<float>(h.data() + at, Precision::Bf16);
    };
    const std::vector<float> a = run(xf.data(), xf.data() + s.A(), kvf.data(), dyf.data());
    const std::vector<float> b = run(half(xh), half(xh, s.A()), half(kvh), half(dyh));
    ASSERT_EQ(a.size(), b.size());
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float))) << "chunk " << c;
  }
}

}  // namespace
}  // namespace mpitrain
