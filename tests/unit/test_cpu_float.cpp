// CpuBackend<float> (what the trainer runs) against CpuBackend<double> on the same inputs, at
// shapes large enough to take the parallel (2-thread) paths and several column blocks.
// Tolerance: normwise relative error max|f - d| / max|d| <= 1e-5, i.e. ~100 float ulps: float
// rounding over sums of a few hundred terms plus the ~2-ulp float exp.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "../../src/backend/cpu_kernels.hpp"
#include "cpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {
namespace {

using testing::random_vec;
using testing::rel_err;
using testing::to_float;
using Vec = std::vector<double>;
using FVec = std::vector<float>;

constexpr double kTol = 1e-5;
constexpr int B = 2, T = 64, C = 320, N = B * T, F = 640, NH = 4, NKV = 2, hs = 80;

// A random input in both precisions (the double copy holds exactly the float values).
struct Pair {
  Vec d;
  FVec f;
  Pair(size_t n, uint64_t seed, double lo = -1.0, double hi = 1.0)
      : d(random_vec(n, seed, lo, hi)), f(to_float(d)) {
    d.assign(f.begin(), f.end());
  }
  explicit Pair(size_t n) : d(n, 0.0), f(n, 0.0f) {}
  double err() const { return rel_err(f, d); }
};

struct Backends {
  CpuBackend<float> f{2};
  CpuBackend<double> d{2};
};

TEST(CpuFloat, ExpFastWithinFewUlps) {
  double worst = 0;
  for (int i = 0; i <= 200000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 200000.0f;
    const double e = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(cpu::exp_fast(x) - e) / e);
  }
  EXPECT_LT(worst, 3 * 5.97e-8) << "max relative error";  // 3 ulp (2^-24 = 5.96e-8)
  EXPECT_EQ(cpu::exp_fast(0.0f), 1.0f);
  EXPECT_LT(cpu::exp_fast(-1e30f), 1e-37f);
  EXPECT_TRUE(std::isnan(cpu::exp_fast(NAN)));
}

TEST(CpuFloat, Matmul) {
  Backends be;
  Pair x(N * C, 1), w(F * C, 2), b(F, 3), out(N * F), dout(N * F, 4), dx(N * C), dw(F * C, 5),
      db(F, 6);
  be.f.matmul_forward(out.f.data(), x.f.data(), w.f.data(), b.f.data(), N, C, F);
  be.d.matmul_forward(out.d.data(), x.d.data(), w.d.data(), b.d.data(), N, C, F);
  EXPECT_LT(out.err(), kTol);
  be.f.matmul_backward(dx.f.data(), dw.f.data(), db.f.data(), dout.f.data(), x.f.data(), w.f.data(),
                       N, C, F, GradWrite::Add);
  be.d.matmul_backward(dx.d.data(), dw.d.data(), db.d.data(), dout.d.data(), x.d.data(), w.d.data(),
                       N, C, F, GradWrite::Add);
  EXPECT_LT(dx.err(), kTol);
  EXPECT_LT(dw.err(), kTol);
  EXPECT_LT(db.err(), kTol);
}

// A small layer's products (at most 2^28 flops each) run as one-thread library calls on blocks of
// rows, side by side (cpu_side_by_side.hpp): at 3 threads each product in 3 blocks (80, 80, 40
// rows of 200: not a multiple of 16); the backward's two at once, the weight's gradient alone.
// (Not the same bits as 1 thread: OpenBLAS's Haswell kernels round a block's tail rows otherwise.)
TEST(CpuFloat, SmallLayersInBlocksOfRows) {
  constexpr int rows = 200, IC = 128, OC = 384;
  Pair x(rows * IC, 1), w(OC * IC, 2), dout(rows * OC, 3), out(rows * OC), dx(rows * IC),
      dw(OC * IC, 4);
  const int saved = omp_get_max_threads();
  {
    CpuBackend<float> f(3);
    CpuBackend<double> d(1);
    f.matmul_forward(out.f.data(), x.f.data(), w.f.data(), nullptr, rows, IC, OC);
    d.matmul_forward(out.d.data(), x.d.data(), w.d.data(), nullptr, rows, IC, OC);
    EXPECT_LT(out.err(), kTol);
    f.matmul_backward(dx.f.data(), dw.f.data(), nullptr, dout.f.data(), x.f.data(), w.f.data(),
                      rows, IC, OC, GradWrite::Add);
    d.matmul_backward(dx.d.data(), dw.d.data(), nullptr, dout.d.data(), x.d.data(), w.d.data(),
                      rows, IC, OC, GradWrite::Add);
    EXPECT_LT(dx.err(), kTol);
    f.matmul_backward(nullptr, dw.f.data(), nullptr, dout.f.data(), x.f.data(), w.f.data(), rows,
                      IC, OC, GradWrite::Add);
    d.matmul_backward(nullptr, dw.d.data(), nullptr, dout.d.data(), x.d.data(), w.d.data(), rows,
                      IC, OC, GradWrite::Add);
    EXPECT_LT(dw.err(), kTol);
  }
  CpuBackend<float> restore(saved);
}

TEST(CpuFloat, Embedding) {
  Backends be;
  const int V = 50;
  std::vector<int32_t> tok(N);
  for (int n = 0; n < N; ++n) tok[n] = (n * 7) % V;
  Pair wte(V * C, 1), wpe(T * C, 2), out(N * C), dout(N * C, 3), dwte(V * C), dwpe(T * C);
  be.f.embedding_forward(out.f.data(), tok.data(), wte.f.data(), wpe.f.data(), B, T, C, 0, V);
  be.d.embedding_forward(out.d.data(), tok.data(), wte.d.data(), wpe.d.data(), B, T, C, 0, V);
  EXPECT_LT(out.err(), kTol);
  be.f.embedding_backward(dwte.f.data(), dwpe.f.data(), dout.f.data(), tok.data(), B, T, C, 0, V);
  be.d.embedding_backward(dwte.d.data(), dwpe.d.data(), dout.d.data(), tok.data(), B, T, C, 0, V);
  EXPECT_LT(dwte.err(), kTol);
  EXPECT_LT(dwpe.err(), kTol);
}

TEST(CpuFloat, LayerNorm) {
  Backends be;
  Pair x(N * C, 1, -2, 3), w(C, 2), b(C, 3), out(N * C), mean(N), rstd(N), dout(N * C, 4),
      dx(N * C, 5), dw(C, 6), db(C, 7);
  be.f.layernorm_forward(out.f.data(), mean.f.data(), rstd.f.data(), x.f.data(), w.f.data(),
                         b.f.data(), N, C, 1e-5f);
  be.d.layernorm_forward(out.d.data(), mean.d.data(), rstd.d.data(), x.d.data(), w.d.data(),
                         b.d.data(), N, C, 1e-5);
  EXPECT_LT(out.err(), kTol);
  EXPECT_LT(mean.err(), kTol);
  EXPECT_LT(rstd.err(), kTol);
  be.f.layernorm_backward(dx.f.data(), dw.f.data(), db.f.data(), dout.f.data(), x.f.data(),
                          w.f.data(), mean.f.data(), rstd.f.data(), N, C);
  be.d.layernorm_backward(dx.d.data(), dw.d.data(), db.d.data(), dout.d.data(), x.d.data(),
                          w.d.data(), mean.d.data(), rstd.d.data(), N, C);
  EXPECT_LT(dx.err(), kTol);
  EXPECT_LT(dw.err(), kTol);
  EXPECT_LT(db.err(), kTol);
}

TEST(CpuFloat, RmsNorm) {
  Backends be;
  Pair x(N * C, 1), w(C, 2), out(N * C), rstd(N), dout(N * C, 4), dx(N * C, 5), dw(C, 6);
  be.f.rmsnorm_forward(out.f.data(), rstd.f.data(), x.f.data(), w.f.data(), N, C, 1e-5f);
  be.d.rmsnorm_forward(out.d.data(), rstd.d.data(), x.d.data(), w.d.data(), N, C, 1e-5);
  EXPECT_LT(out.err(), kTol);
  EXPECT_LT(rstd.err(), kTol);
  be.f.rmsnorm_backward(dx.f.data(), dw.f.data(), dout.f.data(), x.f.data(), w.f.data(),
                        rstd.f.data(), N, C);
  be.d.rmsnorm_backward(dx.d.data(), dw.d.data(), dout.d.data(), x.d.data(), w.d.data(),
                        rstd.d.data(), N, C);
  EXPECT_LT(dx.err(), kTol);
  EXPECT_LT(dw.err(), kTol);
}

TEST(CpuFloat, Pointwise) {
  Backends be;
  const size_t n = static_cast<size_t>(N) * F;
  Pair a(n, 1, -8, 8), b(n, 2), sum(n), act(n), dout(n, 3), dact(n);
  be.f.add(sum.f.data(), a.f.data(), b.f.data(), n);
  be.d.add(sum.d.data(), a.d.data(), b.d.data(), n);
  EXPECT_LT(sum.err(), kTol);
  be.f.gelu_forward(act.f.data(), a.f.data(), n);
  be.d.gelu_forward(act.d.data(), a.d.data(), n);
  EXPECT_LT(act.err(), kTol);
  be.f.gelu_backward(dact.f.data(), a.f.data(), dout.f.data(), n);
  be.d.gelu_backward(dact.d.data(), a.d.data(), dout.d.data(), n);
  EXPECT_LT(dact.err(), kTol);
  // elementwise too: GELU is computed as x sigmoid(2u), accurate in relative terms everywhere
  double worst = 0;
  for (size_t i = 0; i < n; ++i)
    if (act.d[i] != 0.0) worst = std::max(worst, std::abs(act.f[i] - act.d[i]) / std::abs(act.d[i]));
  EXPECT_LT(worst, kTol);

  Pair g(N * 2 * F, 4, -8, 8), out(N * F), dg(N * 2 * F);
  be.f.swiglu_forward(out.f.data(), g.f.data(), N, F);
  be.d.swiglu_forward(out.d.data(), g.d.data(), N, F);
  EXPECT_LT(out.err(), kTol);
  be.f.swiglu_backward(dg.f.data(), g.f.data(), dout.f.data(), N, F);
  be.d.swiglu_backward(dg.d.data(), g.d.data(), dout.d.data(), N, F);
  EXPECT_LT(dg.err(), kTol);
}

TEST(CpuFloat, RopeAndAttention) {
  Backends be;
  const int QKV = (NH + 2 * NKV) * hs, A = NH * hs;
  Pair qkv(N * QKV, 1, -2, 2), out(N * A), lse(B * NH * T), dout(N * A, 2), dqkv(N * QKV),
      scratch(B * NH * T);
  be.f.rope_forward(qkv.f.data(), B, T, NH, NKV, hs, 10000.0f);
  be.d.rope_forward(qkv.d.data(), B, T, NH, NKV, hs, 10000.0);
  EXPECT_LT(qkv.err(), kTol);
  qkv.d.assign(qkv.f.begin(), qkv.f.end());  // attention on identical inputs
  be.f.attention_forward(out.f.data(), lse.f.data(), qkv.f.data(), B, T, NH, NKV, hs,
                         1 / std::sqrt(double(hs)), 0);
  be.d.attention_forward(out.d.data(), lse.d.data(), qkv.d.data(), B, T, NH, NKV, hs,
                         1 / std::sqrt(double(hs)), 0);
  EXPECT_LT(out.err(), kTol);
  EXPECT_LT(lse.err(), kTol);
  be.f.attention_backward(dqkv.f.data(), scratch.f.data(), dout.f.data(), qkv.f.data(),
                          out.f.data(), lse.f.data(), B, T, NH, NKV, hs, 1 / std::sqrt(double(hs)),
                          0);
  be.d.attention_backward(dqkv.d.data(), scratch.d.data(), dout.d.data(), qkv.d.data(),
                          out.d.data(), lse.d.data(), B, T, NH, NKV, hs, 1 / std::sqrt(double(hs)),
                          0);
  EXPECT_LT(dqkv.err(), kTol);
  be.f.rope_backward(dqkv.f.data(), B, T, NH, NKV, hs, 10000.0f);
  be.d.rope_backward(dqkv.d.data(), B, T, NH, NKV, hs, 10000.0);
  EXPECT_LT(dqkv.err(), kTol);
}

// The three cross-entropy phases, on one rank and on tp = 4 simulated ranks (V = 1000, Vp = 1024:
// the last shard holds 232 real and 24 padding columns), float against double on one rank.
TEST(CpuFloat, CrossEntropyAndSumSquares) {
  Backends be;
  const int V = 1000, Vp = 1024;
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; ++n) targets[n] = (n * 37) % V;
  const Pair logits(N * Vp, 1, -6, 6);
  Vec gd = logits.d;
  std::vector<Vec> ld;
  const double td = testing::ce_tensor_parallel(be.d, gd, targets, ld, N, V, Vp, 1, 1.0 / N)[0];
  for (int tp : {1, 4}) {
    FVec gf = logits.f;
    std::vector<FVec> lf;
    const double tf = testing::ce_tensor_parallel(be.f, gf, targets, lf, N, V, Vp, tp, 1.0f / N)[0];
    EXPECT_NEAR(tf, td, kTol * std::abs(td)) << "tp " << tp;
    EXPECT_LT(rel_err(lf[0], ld[0]), kTol) << "tp " << tp;
    EXPECT_LT(rel_err(gf, gd), kTol) << "tp " << tp;
    for (int n = 0; n < N; ++n)
      for (int j = V; j < Vp; ++j) EXPECT_EQ(gf[static_cast<size_t>(n) * Vp + j], 0.0f);
  }
  Pair x(1000003, 2);
  const Segment whole[] = {{0, x.f.size()}};
  const double sf = be.f.sum_squares(x.f.data(), whole);
  const double sd = be.d.sum_squares(x.d.data(), whole);
  EXPECT_NEAR(sf, sd, 1e-12 * sd);  // float inputs, double accumulation: exact up to order
}

}  // namespace
}  // namespace mpitrain
