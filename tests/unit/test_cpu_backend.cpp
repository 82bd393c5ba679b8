// CpuBackend<double>: every op's backward against central finite differences of
// loss = sum(out * R) for a fixed random R (tolerance: see expect_grad in cpu_test_util.hpp),
// plus the accumulate-vs-overwrite contract of backend.hpp.
#include <gtest/gtest.h>
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {
namespace {

using testing::dot;
using testing::expect_grad;
using testing::random_vec;
using Vec = std::vector<double>;

// ---- memory ---------------------------------------------------------------------------------

// The VmFlags of the mapping of /proc/self/smaps that holds p ("" if none does).
std::string vm_flags(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " ", &lo, &hi) == 2)
      inside = lo <= at && at < hi;
    else if (inside && line.rfind("VmFlags:", 0) == 0)
      return line;
  }
  return "";
}

// A tensor of 2 MiB or more starts on a huge page and its mapping carries the advice of its
// CpuPages: "hg" (MADV_HUGEPAGE) or "nh" (MADV_NOHUGEPAGE), whatever the system's setting.
TEST(CpuBackend, LargeTensorsCarryTheirPagesAdvice) {
  if (!std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled"))
    GTEST_SKIP() << "this kernel has no transparent huge pages: madvise refuses the advice";
  for (const CpuPages pages : {CpuPages::Huge, CpuPages::Base}) {
    CpuBackend<float> be(1, pages);
    const size_t n = 3 * kHugePage / sizeof(float) + 5;
    float* x = be.alloc(n);
    const Buf<float> h = be.alloc(n, Precision::Bf16);
    for (const void* p : {static_cast<const void*>(x), static_cast<const void*>(h.data())}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePage, 0u);
      const std::string flags = vm_flags(p);
      EXPECT_NE(flags.find(pages == CpuPages::Huge ? " hg" : " nh"), std::string::npos) << flags;
      EXPECT_EQ(flags.find(pages == CpuPages::Huge ? " nh" : " hg"), std::string::npos) << flags;
    }
    EXPECT_EQ(x[n - 1], 0.0f);
    EXPECT_EQ(h.half()[n - 1], 0u);
    be.free(x);
    be.free(h.data());
  }
}

// Each OpenMP thread's id and minor page faults so far, by thread number (threads of them).
struct ThreadFaults {
  std::vector<pid_t> tid;
  std::vector<long> faults;
};
ThreadFaults thread_faults(int threads) {
  ThreadFaults f{std::vector<pid_t>(threads), std::vector<long>(threads)};
#pragma omp parallel num_threads(threads)
  {
    rusage use{};
    getrusage(RUSAGE_THREAD, &use);
    f.tid[omp_get_thread_num()] = gettid();
    f.faults[omp_get_thread_num()] = use.ru_minflt;
  }
  return f;
}

// A tensor's pages are first touched by all the backend's threads, each its own share: the page
// faults (the kernel clearing the pages; on a machine of several NUMA nodes, the page's node) fall
// on every thread, not on the allocating one alone. 40 MiB is above glibc's largest mmap
// threshold, so the pages are fresh; 4 KiB pages (Base), one fault each.
TEST(CpuBackend, AllocTouchesItsPagesOnEveryThread) {
  constexpr int kThreads = 2;
  CpuBackend<float> be(kThreads, CpuPages::Base);
  const size_t bytes = size_t{40} << 20, pages = bytes / 4096;
  const ThreadFaults before = thread_faults(kThreads);
  float* x = be.alloc(bytes / sizeof(float));
  const ThreadFaults after = thread_faults(kThreads);
  ASSERT_EQ(before.tid, after.tid) << "OpenMP did not keep its threads between the regions";
  // Each thread's share is half the pages; measured 5120 and 5121 faults of the 10240.
  for (int t = 0; t < kThreads; ++t)
    EXPECT_GE(after.faults[t] - before.faults[t], static_cast<long>(pages / (2 * kThreads)))
        << "thread " << t << " of " << kThreads;
  be.free(x);
}

TEST(CpuBackend, AllocIsZeroedAndAligned) {
  CpuBackend<double> be(1);
  double* p = be.alloc(37);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(p[i], 0.0);
  Vec src = random_vec(37, 1);
  be.copy(p, src.data(), 37);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(p[i], src[i]);
  be.zero(p, 37);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(p[i], 0.0);
  be.free(p);
}

// ---- matmul ---------------------------------------------------------------------------------

TEST(CpuMatmul, ForwardMatchesDirectSum) {
  CpuBackend<double> be(1);
  const int N = 3, IC = 4, OC = 5;
  Vec x = random_vec(N * IC, 1), w = random_vec(OC * IC, 2), b = random_vec(OC, 3), out(N * OC);
  be.matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b[o];
      for (int i = 0; i < IC; ++i) s += x[n * IC + i] * w[o * IC + i];
      EXPECT_NEAR(out[n * OC + o], s, 1e-14);
    }
}

TEST(CpuMatmul, GradCheck) {
  CpuBackend<double> be(1);
  const int N = 3, IC = 4, OC = 5;
  Vec x = random_vec(N * IC, 1), w = random_vec(OC * IC, 2), b = random_vec(OC, 3);
  const Vec R = random_vec(N * OC, 4);
  Vec out(N * OC), dx(N * IC), dw(OC * IC), db(OC);
  auto loss = [&] {
    be.matmul_forward(out.data(), x.data(), w.data(), b.data(), N, IC, OC);
    return dot(out, R);
  };
  be.matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC, OC,
                     GradWrite::Add);
  expect_grad("dinp", x, dx, loss);
  expect_grad("dweight", w, dw, loss);
  expect_grad("dbias", b, db, loss);
}

TEST(CpuMatmul, BackwardAccumulatesParamsOverwritesInput) {
  CpuBackend<double> be(1);
  const int N = 3, IC = 4, OC = 5;
  Vec x = random_vec(N * IC, 1), w = random_vec(OC * IC, 2), R = random_vec(N * OC, 4);
  Vec dx(N * IC), dw(OC * IC), db(OC);
  be.matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC, OC,
                     GradWrite::Add);
  const Vec dx1 = dx, dw1 = dw, db1 = db;
  be.matmul_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), N, IC, OC,
                     GradWrite::Add);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_DOUBLE_EQ(dx[i], dx1[i]);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_DOUBLE_EQ(dw[i], 2 * dw1[i]);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_DOUBLE_EQ(db[i], 2 * db1[i]);
  // null dinp and null dbias are skipped; no bias in forward
  Vec dw2(OC * IC), out(N * OC);
  be.matmul_backward(nullptr, dw2.data(), nullptr, R.data(), x.data(), w.data(), N, IC, OC,
                     GradWrite::Add);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_DOUBLE_EQ(dw2[i], dw1[i]);
  be.matmul_forward(out.data(), x.data(), w.data(), nullptr, N, IC, OC);
  EXPECT_NEAR(out[0], x[0] * w[0] + x[1] * w[1] + x[2] * w[2] + x[3] * w[3], 1e-14);
}

// GradWrite::Overwrite writes dweight and dbias as Add writes them onto zeros, without reading
// them (they start as NaN here), on every path a product can take: CpuBackend<double>; float on 1
// and 2 threads (sgemm, and small products side by side); float with bf16 products (oneDNN where
// the CPU has bf16 instructions, else the blocked sgemm), including a product cut along K (N >
// 4 x 4096 rows) and one along M (OC > 4 x 4096); and N = 0, where Overwrite writes zeros and Add
// leaves the values. Onto zeros the two sum the same products in the same order, so the values
// are equal (== : the sign of a zero may differ).
template <typename T>
void expect_overwrite_equals_add_onto_zeros(CpuBackend<T>& be, int N, int IC, int OC) {
  SCOPED_TRACE("N=" + std::to_string(N) + " IC=" + std::to_string(IC) +
               " OC=" + std::to_string(OC));
  const auto values = [](size_t n, uint64_t seed) {
    const Vec d = random_vec(n, seed);
    return std::vector<T>(d.begin(), d.end());
  };
  const std::vector<T> x = values(size_t(N) * IC, 1), w = values(size_t(OC) * IC, 2),
                       dout = values(size_t(N) * OC, 3);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  std::vector<T> dx(size_t(N) * IC), dw_add(size_t(OC) * IC, T(0)), db_add(OC, T(0));
  std::vector<T> dw_over(dw_add.size(), nan), db_over(OC, nan);
  be.matmul_backward(dx.data(), dw_add.data(), db_add.data(), dout.data(), x.data(), w.data(), N,
                     IC, OC, GradWrite::Add);
  be.matmul_backward(dx.data(), dw_over.data(), db_over.data(), dout.data(), x.data(), w.data(), N,
                     IC, OC, GradWrite::Overwrite);
  for (size_t i = 0; i < dw_add.size(); ++i) ASSERT_EQ(dw_over[i], dw_add[i]) << "dweight " << i;
  for (int i = 0; i < OC; ++i) ASSERT_EQ(db_over[i], db_add[i]) << "dbias " << i;
  if (N > 0) {
    ASSERT_NE(dw_add[0], T(0));
    return;
  }
  std::vector<T> dw_kept(dw_add.size(), T(5)), db_kept(OC, T(5));
  be.matmul_backward(nullptr, dw_kept.data(), db_kept.data(), dout.data(), x.data(), w.data(), 0,
                     IC, OC, GradWrite::Add);
  for (T v : dw_kept) ASSERT_EQ(v, T(5)) << "Add of no rows changed dweight";
  for (T v : db_kept) ASSERT_EQ(v, T(5)) << "Add of no rows changed dbias";
}

TEST(CpuMatmul, OverwriteEqualsAddOntoZerosOnEveryPath) {
  struct Shape {
    int N, IC, OC;
  };
  const Shape shapes[] = {{0, 16, 24}, {3, 4, 5}, {7, 33, 65}, {257, 129, 77}, {512, 96, 130}};
  CpuBackend<double> d(1);
  CpuBackend<float> f1(1), f2(2), bf16(2, Precision::Bf16);
  for (const Shape& s : shapes) {
    expect_overwrite_equals_add_onto_zeros(d, s.N, s.IC, s.OC);
    expect_overwrite_equals_add_onto_zeros(f1, s.N, s.IC, s.OC);
    expect_overwrite_equals_add_onto_zeros(f2, s.N, s.IC, s.OC);
    expect_overwrite_equals_add_onto_zeros(bf16, s.N, s.IC, s.OC);
  }
  expect_overwrite_equals_add_onto_zeros(bf16, 16390, 8, 24);   // bf16 pieces along K
  expect_overwrite_equals_add_onto_zeros(bf16, 64, 16, 16400);  // and along M
}

// ---- embeddings -----------------------------------------------------------------------------

TEST(CpuEmbedding, GradCheckWithRepeatedTokens) {
  CpuBackend<double> be(1);
  const int B = 2, T = 3, C = 4, V = 5;
  const std::vector<int32_t> tok = {1, 3, 1, 4, 1, 0};
  Vec wte = random_vec(V * C, 1), wpe = random_vec(T * C, 2), R = random_vec(B * T * C, 3);
  Vec out(B * T * C), dwte(V * C), dwpe(T * C);
  auto loss = [&] {
    be.embedding_forward(out.data(), tok.data(), wte.data(), wpe.data(), B, T, C, 0, V);
    return dot(out, R);
  };
  be.embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, 0, V);
  expect_grad("dwte", wte, dwte, loss);
  expect_grad("dwpe", wpe, dwpe, loss);
  const Vec dwte1 = dwte, dwpe1 = dwpe;  // both accumulate
  be.embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, 0, V);
  for (size_t i = 0; i < dwte.size(); ++i) EXPECT_DOUBLE_EQ(dwte[i], 2 * dwte1[i]);
  for (size_t i = 0; i < dwpe.size(); ++i) EXPECT_DOUBLE_EQ(dwpe[i], 2 * dwpe1[i]);
}

TEST(CpuEmbedding, NoPositionTable) {
  CpuBackend<double> be(1);
  const int B = 1, T = 2, C = 3;
  const std::vector<int32_t> tok = {2, 0};
  Vec wte = random_vec(3 * C, 1), out(B * T * C), dwte(3 * C), R = random_vec(B * T * C, 2);
  be.embedding_forward(out.data(), tok.data(), wte.data(), nullptr, B, T, C, 0, 3);
  for (int c = 0; c < C; ++c) EXPECT_EQ(out[c], wte[2 * C + c]);
  be.embedding_backward(dwte.data(), nullptr, R.data(), tok.data(), B, T, C, 0, 3);
  for (int c = 0; c < C; ++c) EXPECT_EQ(dwte[C + c], 0.0);
  for (int c = 0; c < C; ++c) EXPECT_EQ(dwte[c], R[C + c]);
}

// Vocabulary-parallel: tp shards of wte (rows [r Vl, (r+1) Vl)); tokens of every shard, repeated,
// and (tp = 4) a shard that holds none of them. The shards' outputs summed, with wpe passed to
// shard 0 only, equal the unsplit output exactly (each sum has one non-zero wte term); each
// shard's backward adds to its own rows only, exactly what the unsplit backward adds there, and
// every shard computes the full dwpe.
TEST(CpuEmbedding, VocabParallelShards) {
  CpuBackend<double> be(1);
  const int B = 2, T = 5, C = 3, V = 12, N = B * T;
  const std::vector<int32_t> tok = {0, 11, 5, 2, 5, 3, 9, 11, 0, 10};  // none in rows 6..8
  const Vec wte = random_vec(V * C, 1), wpe = random_vec(T * C, 2), R = random_vec(N * C, 3);
  const Vec prefill = random_vec(V * C, 4), prefill_pe = random_vec(T * C, 5);
  for (const double* pe : {wpe.data(), static_cast<const double*>(nullptr)}) {
    Vec out(N * C), dwte = prefill, dwpe = prefill_pe;
    be.embedding_forward(out.data(), tok.data(), wte.data(), pe, B, T, C, 0, V);
    be.embedding_backward(dwte.data(), dwpe.data(), R.data(), tok.data(), B, T, C, 0, V);
    for (int tp : {2, 3, 4}) {
      const int Vl = V / tp;
      Vec sum(N * C, 0.0);
      for (int r = 0; r < tp; ++r) {
        const int v0 = r * Vl;
        Vec o(N * C, -7.0), dw = prefill, dp = prefill_pe;
        be.embedding_forward(o.data(), tok.data(), wte.data() + v0 * C, r == 0 ? pe : nullptr, B, T,
                             C, v0, Vl);
        for (int i = 0; i < N * C; ++i) sum[i] += o[i];
        for (int n = 0; n < N; ++n) {
          if (tok[n] >= v0 && tok[n] < v0 + Vl) continue;
          for (int c = 0; c < C; ++c)
            EXPECT_EQ(o[n * C + c], r == 0 && pe ? pe[(n % T) * C + c] : 0.0)
                << "token not held: only the position term";
        }
        be.embedding_backward(dw.data() + v0 * C, dp.data(), R.data(), tok.data(), B, T, C, v0, Vl);
        for (int i = 0; i < V * C; ++i) {
          const bool held = i >= v0 * C && i < (v0 + Vl) * C;
          EXPECT_EQ(dw[i], held ? dwte[i] : prefill[i]) << "tp " << tp << " rank " << r << " " << i;
        }
        for (int i = 0; i < T * C; ++i) EXPECT_EQ(dp[i], dwpe[i]) << "dwpe on every shard";
      }
      for (int i = 0; i < N * C; ++i) EXPECT_EQ(sum[i], out[i]) << "tp " << tp << " " << i;
    }
  }
}

// ---- norms ----------------------------------------------------------------------------------

TEST(CpuLayerNorm, GradCheckAndAccumulation) {
  CpuBackend<double> be(1);
  const int N = 3, C = 6;
  Vec x = random_vec(N * C, 1), w = random_vec(C, 2, 0.5, 1.5), b = random_vec(C, 3);
  const Vec R = random_vec(N * C, 4);
  Vec out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C);
  auto loss = [&] {
    be.layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                         1e-5);
    return dot(out, R);
  };
  loss();
  for (int n = 0; n < N; ++n) {  // saved statistics
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += x[n * C + c] / C;
    for (int c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m) / C;
    EXPECT_NEAR(mean[n], m, 1e-15);
    EXPECT_NEAR(rstd[n], 1 / std::sqrt(v + 1e-5), 1e-12);
  }
  be.layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                        rstd.data(), N, C);
  const Vec dx1 = dx, dw1 = dw, db1 = db;
  expect_grad("dinp", x, dx1, loss);
  expect_grad("dw", w, dw1, loss);
  expect_grad("db", b, db1, loss);
  loss();  // restore mean, rstd
  // dinp, dw and db all accumulate (dinp: the residual stream's gradient flows through)
  be.layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(),
                        rstd.data(), N, C);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], 2 * dx1[i], 1e-14);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-14);
  for (size_t i = 0; i < db.size(); ++i) EXPECT_NEAR(db[i], 2 * db1[i], 1e-14);
}

TEST(CpuRmsNorm, GradCheckAndAccumulation) {
  CpuBackend<double> be(1);
  const int N = 3, C = 6;
  Vec x = random_vec(N * C, 1), w = random_vec(C, 2, 0.5, 1.5);
  const Vec R = random_vec(N * C, 4);
  Vec out(N * C), rstd(N), dx(N * C), dw(C);
  auto loss = [&] {
    be.rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5);
    return dot(out, R);
  };
  loss();
  for (int n = 0; n < N; ++n) {
    double ss = 0;
    for (int c = 0; c < C; ++c) ss += x[n * C + c] * x[n * C + c] / C;
    EXPECT_NEAR(rstd[n], 1 / std::sqrt(ss + 1e-5), 1e-12);
    EXPECT_NEAR(out[n * C], x[n * C] * rstd[n] * w[0], 1e-15);
  }
  be.rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
  const Vec dx1 = dx, dw1 = dw;
  expect_grad("dinp", x, dx1, loss);
  expect_grad("dw", w, dw1, loss);
  loss();
  be.rmsnorm_backward(dx.data(), dw.data(), R.data(), x.data(), w.data(), rstd.data(), N, C);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], 2 * dx1[i], 1e-14);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-14);
}

// ---- pointwise ------------------------------------------------------------------------------

TEST(CpuPointwise, Add) {
  CpuBackend<double> be(1);
  Vec a = random_vec(11, 1), b = random_vec(11, 2), out(11);
  be.add(out.data(), a.data(), b.data(), 11);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(out[i], a[i] + b[i]);
  be.add(a.data(), a.data(), b.data(), 11);  // in place on the residual stream
  for (int i = 0; i < 11; ++i) EXPECT_EQ(a[i], out[i]);
}

TEST(CpuGelu, MatchesTanhFormulaAndGradCheck) {
  CpuBackend<double> be(1);
  const int n = 40;
  Vec x = random_vec(n, 1, -6.0, 6.0), out(n), dx(n, 123.0);
  const Vec R = random_vec(n, 2);
  be.gelu_forward(out.data(), x.data(), n);
  for (int i = 0; i < n; ++i) {
    const double u = std::sqrt(2 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i]);
    EXPECT_NEAR(out[i], 0.5 * x[i] * (1 + std::tanh(u)), 1e-14);
  }
  auto loss = [&] {
    be.gelu_forward(out.data(), x.data(), n);
    return dot(out, R);
  };
  be.gelu_backward(dx.data(), x.data(), R.data(), n);  // overwrites the 123s
  const Vec dx1 = dx;
  expect_grad("dinp", x, dx1, loss);
  be.gelu_backward(dx.data(), x.data(), R.data(), n);
  for (int i = 0; i < n; ++i) EXPECT_EQ(dx[i], dx1[i]);
}

TEST(CpuSwiglu, ForwardGradCheckOverwrite) {
  CpuBackend<double> be(1);
  const int N = 3, F = 5;
  Vec x = random_vec(N * 2 * F, 1, -4.0, 4.0), out(N * F), dx(N * 2 * F, 7.0);
  const Vec R = random_vec(N * F, 2);
  be.swiglu_forward(out.data(), x.data(), N, F);
  for (int n = 0; n < N; ++n)
    for (int f = 0; f < F; ++f) {
      const double g = x[n * 2 * F + f], u = x[n * 2 * F + F + f];
      EXPECT_NEAR(out[n * F + f], g / (1 + std::exp(-g)) * u, 1e-14);
    }
  auto loss = [&] {
    be.swiglu_forward(out.data(), x.data(), N, F);
    return dot(out, R);
  };
  be.swiglu_backward(dx.data(), x.data(), R.data(), N, F);
  const Vec dx1 = dx;
  expect_grad("dinp", x, dx1, loss);
  be.swiglu_backward(dx.data(), x.data(), R.data(), N, F);
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], dx1[i]);
}

// ---- RoPE -----------------------------------------------------------------------------------

TEST(CpuRope, InterleavedPairsRotateByPositionTimesFrequency) {
  CpuBackend<double> be(1);
  const int B = 1, T = 3, NH = 2, NKV = 1, hs = 4, QKV = (NH + 2 * NKV) * hs;
  const double theta = 100.0;
  Vec qkv = random_vec(B * T * QKV, 1);
  const Vec x = qkv;
  be.rope_forward(qkv.data(), B, T, NH, NKV, hs, theta);
  for (int t = 0; t < T; ++t)
    for (int h = 0; h < NH + 2 * NKV; ++h)
      for (int i = 0; i < hs / 2; ++i) {
        const int k = t * QKV + h * hs + 2 * i;
        const double a = h < NH + NKV ? t * std::pow(theta, -2.0 * i / hs) : 0.0;  // v: no rotation
        EXPECT_NEAR(qkv[k], x[k] * std::cos(a) - x[k + 1] * std::sin(a), 1e-14);
        EXPECT_NEAR(qkv[k + 1], x[k] * std::sin(a) + x[k + 1] * std::cos(a), 1e-14);
      }
}

TEST(CpuRope, PreservesNormsBackwardIsInverseAndGradCheck) {
  CpuBackend<double> be(1);
  const int B = 2, T = 5, NH = 4, NKV = 2, hs = 6, QKV = (NH + 2 * NKV) * hs;
  const double theta = 10000.0;
  Vec qkv = random_vec(B * T * QKV, 1);
  const Vec x = qkv;
  be.rope_forward(qkv.data(), B, T, NH, NKV, hs, theta);
  for (int r = 0; r < B * T; ++r)
    for (int h = 0; h < NH + 2 * NKV; ++h) {
      double n0 = 0, n1 = 0;
      for (int i = 0; i < hs; ++i) {
        n0 += x[r * QKV + h * hs + i] * x[r * QKV + h * hs + i];
        n1 += qkv[r * QKV + h * hs + i] * qkv[r * QKV + h * hs + i];
      }
      EXPECT_NEAR(n1, n0, 1e-13);
    }
  be.rope_backward(qkv.data(), B, T, NH, NKV, hs, theta);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(qkv[i], x[i], 1e-14);

  Vec in = x, out(x.size());
  const Vec R = random_vec(x.size(), 2);
  auto loss = [&] {
    out = in;
    be.rope_forward(out.data(), B, T, NH, NKV, hs, theta);
    return dot(out, R);
  };
  Vec d = R;
  be.rope_backward(d.data(), B, T, NH, NKV, hs, theta);
  expect_grad("dqkv", in, d, loss);
}

// ---- attention ------------------------------------------------------------------------------

// Direct double reference: y[b,t,h] = sum_{j<=t} softmax_j(q_t . k_j / sqrt(hs)) v_j, kv head h/G.
Vec attention_reference(const Vec& qkv, int B, int T, int NH, int NKV, int hs) {
  const int QKV = (NH + 2 * NKV) * hs, G = NH / NKV;
  Vec out(static_cast<size_t>(B) * T * NH * hs);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < NH; ++h)
      for (int t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * QKV + h * hs];
        std::vector<double> s(t + 1);
        double mx = -1e300, z = 0;
        for (int j = 0; j <= t; ++j) {
          const double* k = &qkv[(b * T + j) * QKV + (NH + h / G) * hs];
          double d = 0;
          for (int i = 0; i < hs; ++i) d += q[i] * k[i];
          s[j] = d / std::sqrt(hs);
          mx = std::max(mx, s[j]);
        }
        for (int j = 0; j <= t; ++j) z += s[j] = std::exp(s[j] - mx);
        for (int i = 0; i < hs; ++i) {
          double y = 0;
          for (int j = 0; j <= t; ++j) y += s[j] / z * qkv[(b * T + j) * QKV + (NH + NKV + h / G) * hs + i];
          out[(b * T + t) * NH * hs + h * hs + i] = y;
        }
      }
  return out;
}

void attention_grad_check(int B, int T, int NH, int NKV, int hs) {
  CpuBackend<double> be(1);
  const int QKV = (NH + 2 * NKV) * hs;
  Vec qkv = random_vec(B * T * QKV, 1, -1.5, 1.5);
  const Vec R = random_vec(B * T * NH * hs, 2);
  Vec out(B * T * NH * hs), probs(B * NH * T, -1.0), scratch(B * NH * T, 99.0);
  Vec dqkv(qkv.size(), 55.0);
  auto loss = [&] {
    be.attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH, NKV, hs,
                         1 / std::sqrt(double(hs)), 0);
    return dot(out, R);
  };
  loss();
  const Vec ref = attention_reference(qkv, B, T, NH, NKV, hs);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(out[i], ref[i], 1e-14);
  be.attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), out.data(), probs.data(),
                        B, T, NH, NKV, hs, 1 / std::sqrt(double(hs)), 0);
  const Vec d1 = dqkv;
  expect_grad("dqkv", qkv, d1, loss);
  loss();
  be.attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), out.data(), probs.data(),
                        B, T, NH, NKV, hs, 1 / std::sqrt(double(hs)), 0);
  for (size_t i = 0; i < dqkv.size(); ++i) EXPECT_EQ(dqkv[i], d1[i]) << "dqkv is overwritten";
}

TEST(CpuAttention, GradCheckMultiHead) { attention_grad_check(2, 5, 3, 3, 4); }
TEST(CpuAttention, GradCheckGroupedQuery) { attention_grad_check(2, 5, 4, 2, 4); }
TEST(CpuAttention, GradCheckMultiQuery) { attention_grad_check(1, 4, 4, 1, 3); }

TEST(CpuAttention, CausalNoGradientToTheFuture) {
  CpuBackend<double> be(1);
  const int B = 2, T = 6, NH = 4, NKV = 2, hs = 4, QKV = (NH + 2 * NKV) * hs, t0 = 2;
  Vec qkv = random_vec(B * T * QKV, 1), out(B * T * NH * hs), probs(B * NH * T);
  Vec scratch(B * NH * T), dqkv(qkv.size());
  Vec R(out.size(), 0.0);  // only outputs at t <= t0 matter
  for (int b = 0; b < B; ++b)
    for (int t = 0; t <= t0; ++t)
      for (int i = 0; i < NH * hs; ++i) R[(b * T + t) * NH * hs + i] = std::sin(1.0 + i + t + b);
  be.attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH, NKV, hs,
                       1 / std::sqrt(double(hs)), 0);
  be.attention_backward(dqkv.data(), scratch.data(), R.data(), qkv.data(), out.data(), probs.data(),
                        B, T, NH, NKV, hs, 1 / std::sqrt(double(hs)), 0);
  double past = 0;
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < QKV; ++i) {
        const double g = dqkv[(b * T + t) * QKV + i];
        if (t > t0)
          EXPECT_EQ(g, 0.0) << "b " << b << " t " << t << " i " << i;
        else
          past += std::abs(g);
      }
  EXPECT_GT(past, 0.0);
  // and the outputs at t <= t0 do not move when the future changes
  const Vec out0 = out;
  for (int i = 0; i < QKV; ++i) qkv[(T - 1) * QKV + i] += 1.0;
  be.attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH, NKV, hs,
                       1 / std::sqrt(double(hs)), 0);
  for (int t = 0; t < T - 1; ++t)
    for (int i = 0; i < NH * hs; ++i) EXPECT_EQ(out[t * NH * hs + i], out0[t * NH * hs + i]);
}

// ---- cross-entropy --------------------------------------------------------------------------

// Logits with the padding columns (>= V) at 1e3: any use of them in the max or the sums shows.
Vec padded_logits(int N, int V, int Vp, uint64_t seed, double lo = -3.0, double hi = 3.0) {
  Vec x = random_vec(static_cast<size_t>(N) * Vp, seed, lo, hi);
  for (int n = 0; n < N; ++n)
    for (int j = V; j < Vp; ++j) x[n * Vp + j] = 1e3;
  return x;
}

// One rank (v0 = 0, Vl = Vp): each phase's output, the losses and the gradient against a direct
// double computation over the V real columns.
TEST(CpuCrossEntropy, PhasesMatchDirectComputation) {
  CpuBackend<double> be(1);
  const int N = 4, V = 10, Vp = 16;
  const std::vector<int32_t> targets = {0, 9, 4, 9};
  const Vec logits = padded_logits(N, V, Vp, 1);
  const double dloss = 1.0 / N;
  Vec row_max(N), stats(2 * N), losses(N, -1.0), x = logits;
  be.ce_row_max(x.data(), row_max.data(), N, Vp, 0, V);
  be.ce_stats(x.data(), row_max.data(), targets.data(), stats.data(), N, Vp, 0, V);
  const double total = be.ce_loss(x.data(), row_max.data(), stats.data(), targets.data(),
                                  losses.data(), N, Vp, 0, V, 0.0);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], logits[i]) << "dloss == 0: untouched";
  Vec grad = logits, losses2(N);
  const double total2 = be.ce_loss(grad.data(), row_max.data(), stats.data(), targets.data(),
                                   losses2.data(), N, Vp, 0, V, dloss);
  EXPECT_EQ(total2, total) << "the total does not depend on dloss";
  double expect_total = 0;
  for (int n = 0; n < N; ++n) {
    const double* l = logits.data() + n * Vp;
    double m = l[0];
    for (int j = 1; j < V; ++j) m = std::max(m, l[j]);
    double z = 0;
    for (int j = 0; j < V; ++j) z += std::exp(l[j] - m);
    EXPECT_EQ(row_max[n], m);
    EXPECT_NEAR(stats[n], z, 1e-14 * z);
    EXPECT_EQ(stats[N + n], l[targets[n]]);
    const double loss = std::log(z) + m - l[targets[n]];
    EXPECT_NEAR(losses[n], loss, 1e-14);
    EXPECT_EQ(losses2[n], losses[n]);
    expect_total += loss;
    for (int j = 0; j < Vp; ++j) {
      const double g = j < V ? (std::exp(l[j] - m) / z - (j == targets[n])) * dloss : 0.0;
      if (j < V) {
        EXPECT_NEAR(grad[n * Vp + j], g, 1e-15) << n << "," << j;
      } else {
        EXPECT_EQ(grad[n * Vp + j], 0.0) << "padding gradient";
      }
    }
  }
  EXPECT_NEAR(total, expect_total, 1e-13);
}

// Simulated tensor parallelism (testing::ce_tensor_parallel): tp = 2 and 4 column shards of
// V = 10, Vp = 16, so tp = 2 has a shard of real and padding columns and tp = 4 one of padding
// only (columns 12..15); the row maxima and targets fall in different shards. Losses, totals and
// the concatenated gradient equal the unsplit ones up to the summation order of e^x (1e-12).
TEST(CpuCrossEntropy, SimulatedTensorParallel) {
  CpuBackend<double> be(1);
  const int N = 6, V = 10, Vp = 16;
  const std::vector<int32_t> targets = {0, 9, 4, 8, 3, 7};
  Vec logits = padded_logits(N, V, Vp, 2, -20.0, 20.0);
  logits[0 * Vp + 9] = 25.0;  // row 0: max in the last shard with real columns, target in shard 0
  logits[1 * Vp + 0] = 25.0;  // row 1: max in shard 0, target (9) in a later shard
  const double dloss = 0.25;
  std::vector<Vec> losses1;
  Vec grad1 = logits;
  const double total1 =
      testing::ce_tensor_parallel(be, grad1, targets, losses1, N, V, Vp, 1, dloss)[0];
  for (int tp : {2, 4}) {
    std::vector<Vec> losses;
    Vec grad = logits;
    const std::vector<double> totals =
        testing::ce_tensor_parallel(be, grad, targets, losses, N, V, Vp, tp, dloss);
    for (int r = 0; r < tp; ++r) {
      EXPECT_EQ(totals[r], totals[0]) << "every rank computes the same total";
      EXPECT_NEAR(totals[r], total1, 1e-12 * std::abs(total1)) << "tp " << tp;
      for (int n = 0; n < N; ++n) {
        EXPECT_EQ(losses[r][n], losses[0][n]);
        EXPECT_NEAR(losses[r][n], losses1[0][n], 1e-12 * std::abs(losses1[0][n]));
      }
    }
    for (size_t i = 0; i < grad.size(); ++i)
      EXPECT_NEAR(grad[i], grad1[i], 1e-12 * dloss) << "tp " << tp << " " << i;
  }
  // The padding-only shard on its own: row_max -inf, zero sums, zero gradient.
  const int Vl = 4, v0 = 12;
  Vec shard(N * Vl, 1e3), row_max(N), stats(2 * N, -1.0), losses(N), gmax(N, 0.0),
      gstats(2 * N, 1.0);
  be.ce_row_max(shard.data(), row_max.data(), N, Vl, v0, V);
  be.ce_stats(shard.data(), gmax.data(), targets.data(), stats.data(), N, Vl, v0, V);
  be.ce_loss(shard.data(), gmax.data(), gstats.data(), targets.data(), losses.data(), N, Vl, v0, V,
             dloss);
  for (int n = 0; n < N; ++n) {
    EXPECT_EQ(row_max[n], -std::numeric_limits<double>::infinity());
    EXPECT_EQ(stats[n], 0.0);
    EXPECT_EQ(stats[N + n], 0.0);
  }
  for (double g : shard) EXPECT_EQ(g, 0.0);
}

// Phase 3's gradient against finite differences of the composed loss dloss * sum of losses,
// on one rank and on tp = 4 simulated ranks.
TEST(CpuCrossEntropy, GradCheck) {
  CpuBackend<double> be(1);
  const int N = 3, V = 10, Vp = 16;
  const std::vector<int32_t> targets = {0, 9, 4};
  const double dloss = 1.0 / N;
  for (int tp : {1, 4}) {
    Vec in = padded_logits(N, V, Vp, 3), grad = in, x;
    std::vector<Vec> losses;
    testing::ce_tensor_parallel(be, grad, targets, losses, N, V, Vp, tp, dloss);
    auto loss = [&] {
      x = in;
      return dloss * testing::ce_tensor_parallel(be, x, targets, losses, N, V, Vp, tp, 0.0)[0];
    };
    expect_grad("dlogits tp " + std::to_string(tp), in, grad, loss);
  }
}

// Unscored targets (--mask-boundary-loss): their rows' losses and gradients are 0 on every tp
// rank, and the other rows get the bits they get with every row scored; the total is theirs.
TEST(CpuCrossEntropy, UnscoredRowsAddNothing) {
  CpuBackend<double> be(1);
  const int N = 6, V = 10, Vp = 16;
  const std::vector<int32_t> scored = {0, 9, 4, 8, 3, 7};
  std::vector<int32_t> masked = scored;
  masked[1] = masked[4] = kUnscored;
  const Vec logits = padded_logits(N, V, Vp, 4);
  const double dloss = 0.25;
  for (int tp : {1, 2, 4}) {
    std::vector<Vec> all_losses, losses;
    Vec all = logits, grad = logits;
    testing::ce_tensor_parallel(be, all, scored, all_losses, N, V, Vp, tp, dloss);
    const std::vector<double> totals =
        testing::ce_tensor_parallel(be, grad, masked, losses, N, V, Vp, tp, dloss);
    double expect_total = 0;
    for (int n = 0; n < N; ++n) {
      const bool counts = masked[n] != kUnscored;
      if (counts) expect_total += all_losses[0][n];
      for (int r = 0; r < tp; ++r)
        EXPECT_EQ(losses[r][n], counts ? all_losses[r][n] : 0.0) << "tp " << tp << " row " << n;
      for (int j = 0; j < Vp; ++j)
        EXPECT_EQ(grad[n * Vp + j], counts ? all[n * Vp + j] : 0.0) << "tp " << tp << " " << n;
    }
    for (int r = 0; r < tp; ++r) EXPECT_EQ(totals[r], expect_total) << "tp " << tp;
  }
}

// ---- optimizer ------------------------------------------------------------------------------

TEST(CpuOptimizer, SumSquaresAndScale) {
  CpuBackend<double> be(1);
  Vec x = random_vec(100003, 1);
  double s = 0;
  for (double v : x) s += v * v;
  const Segment whole[] = {{0, x.size()}};
  EXPECT_NEAR(be.sum_squares(x.data(), whole), s, 1e-12 * s);  // summation order differs
  EXPECT_EQ(be.sum_squares(x.data(), {}), 0.0);
  const Vec x0 = x;
  be.scale(x.data(), 0.25, x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], 0.25 * x0[i]);
}

// AdamW against a hand-written double reference; float on the same inputs within 1e-6.
TEST(CpuOptimizer, AdamWMatchesReference) {
  const size_t n = 37;  // not a multiple of the SIMD width: exercises the tail
  const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
  Vec p = random_vec(n, 1), m(n, 0.0), v(n, 0.0);
  std::vector<Vec> grads = {random_vec(n, 2), random_vec(n, 3), random_vec(n, 4)};
  Vec rp = p, rm = m, rv = v;
  CpuBackend<double> be(1);
  CpuBackend<float> bf(1);
  std::vector<float> fp = testing::to_float(p), fm(n, 0.f), fv(n, 0.f);
  const Segment whole[] = {{0, n, true}};
  for (int t = 1; t <= 3; ++t) {
    const Vec& g = grads[t - 1];
    for (size_t i = 0; i < n; ++i) {
      const double gi = g[i] * double(gs);
      rm[i] = double(b1) * rm[i] + (1 - double(b1)) * gi;
      rv[i] = double(b2) * rv[i] + (1 - double(b2)) * gi * gi;
      const double mh = rm[i] / (1 - std::pow(double(b1), t));
      const double vh = rv[i] / (1 - std::pow(double(b2), t));
      rp[i] -= double(lr) * (mh / (std::sqrt(vh) + double(eps)) + double(wd) * rp[i]);
    }
    be.adamw(p.data(), g.data(), m.data(), v.data(), whole, lr, b1, b2, eps, wd, t, gs, {});
    const std::vector<float> fg = testing::to_float(g);
    bf.adamw(fp.data(), fg.data(), fm.data(), fv.data(), whole, lr, b1, b2, eps, wd, t, gs, {});
  }
  for (size_t i = 0; i < n; ++i) {
    EXPECT_NEAR(p[i], rp[i], 1e-14);
    EXPECT_NEAR(m[i], rm[i], 1e-15);
    EXPECT_NEAR(v[i], rv[i], 1e-15);
    EXPECT_NEAR(fp[i], rp[i], 1e-6);
    EXPECT_NEAR(fm[i], rm[i], 1e-6);
    EXPECT_NEAR(fv[i], rv[i], 1e-6);
  }
}

}  // namespace
}  // namespace mpitrain
