// CpuBackend<float> constructed for bf16: the linear layer through oneDNN's bf16 matmul, against a
// double reference computed from the same bf16-valued operands, and against the sgemm path.
//
// Tolerance: a product of two bf16 values is exact in fp32 (8 + 8 significant bits <= 24), so
// the only error is fp32 accumulation over K terms: |error| <= K u sum|a b| in the worst case
// (u = 2^-24), and for the random-sign sums here its normwise size is ~u sqrt(K) ||ref||. Bound:
// ||out - ref||_F / ||ref||_F <= 2 u sqrt(K), i.e. 1.2e-7 at K = 1, 3.8e-6 at K = 1024 —
// ~1e-6 for the K of a few hundred used here, and 3 orders below one bf16 rounding (2^-9).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../../src/backend/cpu_matmul_bf16.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {
namespace {

using FVec = std::vector<float>;
using DVec = std::vector<double>;

double bound(int K) { return 2.0 * std::ldexp(1.0, -24) * std::sqrt(static_cast<double>(K)); }

// n values uniform in [-1, 1), rounded to bf16 (or left in fp32 when `bf16` is false).
FVec random_values(size_t n, uint64_t seed, bool bf16 = true) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  FVec v(n);
  for (float& x : v) x = bf16 ? round_to(dist(gen), Precision::Bf16) : dist(gen);
  return v;
}

// The bf16 bits of each value (exact for bf16 values).
std::vector<uint16_t> bits(const FVec& v) {
  std::vector<uint16_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = to_bf16_bits(v[i]);
  return b;
}

FVec rounded(const FVec& v) {
  FVec r(v);
  for (float& x : r) x = round_to(x, Precision::Bf16);
  return r;
}

// ||a - ref||_F / ||ref||_F.
double rel_frobenius(const FVec& a, const DVec& ref) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

// The linear layer in double: out = inp W^T + bias; dinp = dout W; dW = dW0 + dout^T inp;
// dbias = dbias0 + column sums of dout.
struct Reference {
  DVec out, dinp, dw, dbias;
  Reference(const FVec& inp, const FVec& w, const FVec* bias, const FVec& dout, const FVec& dw0,
            const FVec& dbias0, int N, int IC, int OC)
      : out(static_cast<size_t>(N) * OC),
        dinp(static_cast<size_t>(N) * IC),
        dw(dw0.begin(), dw0.end()),
        dbias(dbias0.begin(), dbias0.end()) {
    for (int n = 0; n < N; ++n) {
      const float* x = inp.data() + static_cast<size_t>(n) * IC;
      const float* d = dout.data() + static_cast<size_t>(n) * OC;
      double* dx = dinp.data() + static_cast<size_t>(n) * IC;
      for (int o = 0; o < OC; ++o) {
        const float* wo = w.data() + static_cast<size_t>(o) * IC;
        double* dwo = dw.data() + static_cast<size_t>(o) * IC;
        double s = bias ? (*bias)[o] : 0.0;
        for (int i = 0; i < IC; ++i) {
          s += static_cast<double>(x[i]) * wo[i];
          dx[i] += static_cast<double>(d[o]) * wo[i];
          dwo[i] += static_cast<double>(d[o]) * x[i];
        }
        out[static_cast<size_t>(n) * OC + o] = s;
        dbias[o] += d[o];
      }
    }
  }
};

// One forward and backward of the linear layer on `be`; dw and dbias start from dw0, dbias0.
struct Result {
  FVec out, dinp, dw, dbias;
};
Result run(CpuBackend<float>& be, const FVec& inp, const FVec& w, const FVec* bias,
           const FVec& dout, const FVec& dw0, const FVec& dbias0, int N, int IC, int OC) {
  Result r{FVec(static_cast<size_t>(N) * OC), FVec(static_cast<size_t>(N) * IC), dw0, dbias0};
  be.matmul_forward(r.out.data(), inp.data(), w.data(), bias ? bias->data() : nullptr, N, IC, OC);
  be.matmul_backward(r.dinp.data(), r.dw.data(), r.dbias.data(), dout.data(), inp.data(), w.data(),
                     N, IC, OC, GradWrite::Add);
  return r;
}

struct Shape {
  int N, IC, OC;
};
// N = 1, odd sizes, sizes below and above oneDNN's blocks, a K (= N for dW) of several hundred;
// the last, every dimension >= 512, through oneDNN's jit gemm (cpu_matmul_bf16.hpp: brgemm on a
// CPU with AMX), the others through its brgemm.
const Shape kShapes[] = {{1, 64, 96},    {1, 257, 3},    {7, 33, 65},    {3, 1, 5},
                         {64, 320, 640}, {257, 129, 77}, {512, 96, 130}, {512, 512, 640}};

std::string name(const Shape& s) {
  return "N=" + std::to_string(s.N) + " IC=" + std::to_string(s.IC) + " OC=" + std::to_string(s.OC);
}

TEST(CpuBf16Gemm, ForwardAndBackwardMatchDoubleReference) {
  CpuBackend<float> be(2, Precision::Bf16);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const size_t ni = static_cast<size_t>(s.N) * s.IC, nw = static_cast<size_t>(s.OC) * s.IC,
                 no = static_cast<size_t>(s.N) * s.OC;
    const FVec inp = random_values(ni, 1), w = random_values(nw, 2), bias = random_values(s.OC, 3),
               dout = random_values(no, 4);
    // dW and dbias accumulate onto values that are not bf16: the sum stays in fp32.
    const FVec dw0 = random_values(nw, 5, false), dbias0 = random_values(s.OC, 6, false);
    for (const FVec* b : {&bias, static_cast<const FVec*>(nullptr)}) {
      SCOPED_TRACE(b ? "with bias" : "no bias");
      const Reference ref(inp, w, b, dout, dw0, dbias0, s.N, s.IC, s.OC);
      const Result r = run(be, inp, w, b, dout, dw0, dbias0, s.N, s.IC, s.OC);
      EXPECT_LE(rel_frobenius(r.out, ref.out), bound(s.IC)) << "out";
      EXPECT_LE(rel_frobenius(r.dinp, ref.dinp), bound(s.OC)) << "dinp";
      EXPECT_LE(rel_frobenius(r.dw, ref.dw), bound(s.N + 1)) << "dw (K = N, plus dW0)";
      EXPECT_LE(rel_frobenius(r.dbias, ref.dbias), bound(s.N + 1)) << "dbias";
    }
  }
}

TEST(CpuBf16Gemm, WeightGradientAccumulatesAndInputGradientIsOptional) {
  CpuBackend<float> be(2, Precision::Bf16);
  const int N = 96, IC = 80, OC = 48;
  const FVec inp = random_values(N * IC, 7), w = random_values(OC * IC, 8),
             dout = random_values(N * OC, 9);
  const FVec zero_w(OC * IC, 0.0f), zero_b(OC, 0.0f);
  FVec dw(zero_w), dbias(zero_b);
  for (int call = 0; call < 3; ++call)
    be.matmul_backward(nullptr, dw.data(), dbias.data(), dout.data(), inp.data(), w.data(), N, IC,
                       OC, GradWrite::Add);
  const Reference once(inp, w, nullptr, dout, zero_w, zero_b, N, IC, OC);
  DVec thrice(once.dw), thrice_b(once.dbias);
  for (double& x : thrice) x *= 3;
  for (double& x : thrice_b) x *= 3;
  EXPECT_LE(rel_frobenius(dw, thrice), bound(3 * N));
  EXPECT_LE(rel_frobenius(dbias, thrice_b), bound(3 * N));
}

// The backend converts operands on every call (reusing dout's bf16 copy only within one
// backward): buffers rewritten in place between calls give the new results.
TEST(CpuBf16Gemm, OperandsRewrittenInPlaceAreConvertedAgain) {
  CpuBackend<float> be(2, Precision::Bf16);
  const int N = 40, IC = 72, OC = 56;
  const FVec inp = random_values(N * IC, 31), w = random_values(OC * IC, 32),
             dout1 = random_values(N * OC, 33), dout2 = random_values(N * OC, 34);
  const FVec zero_w(OC * IC, 0.0f), zero_b(OC, 0.0f);
  FVec dout(dout1), dinp(N * IC), dw(zero_w), out(N * OC);
  be.matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC, OC,
                     GradWrite::Add);
  std::copy(dout2.begin(), dout2.end(), dout.begin());  // same buffer, new values
  be.matmul_backward(nullptr, dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC, OC,
                     GradWrite::Add);
  be.matmul_backward(dinp.data(), dw.data(), nullptr, dout.data(), inp.data(), w.data(), N, IC, OC,
                     GradWrite::Add);
  const Reference r1(inp, w, nullptr, dout1, zero_w, zero_b, N, IC, OC);
  const Reference r2(inp, w, nullptr, dout2, zero_w, zero_b, N, IC, OC);
  DVec want(r1.dw);
  for (size_t i = 0; i < want.size(); ++i) want[i] += 2 * r2.dw[i];
  EXPECT_LE(rel_frobenius(dw, want), bound(3 * N)) << "dW = dout1^T inp + 2 dout2^T inp";
  EXPECT_LE(rel_frobenius(dinp, r2.dinp), bound(OC)) << "dinp of dout2";
  FVec x(inp);
  be.matmul_forward(out.data(), x.data(), w.data(), nullptr, N, IC, OC);
  const FVec x2 = random_values(N * IC, 35);
  std::copy(x2.begin(), x2.end(), x.begin());
  be.matmul_forward(out.data(), x.data(), w.data(), nullptr, N, IC, OC);
  EXPECT_LE(rel_frobenius(out, Reference(x, w, nullptr, dout1, zero_w, zero_b, N, IC, OC).out),
            bound(IC));
}

TEST(CpuBf16Gemm, EqualsTheSgemmPathOnBf16Operands) {
  CpuBackend<float> bf16(2, Precision::Bf16), sgemm(2);
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const size_t ni = static_cast<size_t>(s.N) * s.IC, nw = static_cast<size_t>(s.OC) * s.IC,
                 no = static_cast<size_t>(s.N) * s.OC;
    const FVec inp = random_values(ni, 11), w = random_values(nw, 12),
               bias = random_values(s.OC, 13), dout = random_values(no, 14),
               dw0 = random_values(nw, 15, false), dbias0 = random_values(s.OC, 16, false);
    const Result a = run(bf16, inp, w, &bias, dout, dw0, dbias0, s.N, s.IC, s.OC);
    const Result b = run(sgemm, inp, w, &bias, dout, dw0, dbias0, s.N, s.IC, s.OC);
    // Both are within bound(K) of the reference, so within ~twice that of each other.
    EXPECT_LE(rel_frobenius(a.out, DVec(b.out.begin(), b.out.end())), 2 * bound(s.IC)) << "out";
    EXPECT_LE(rel_frobenius(a.dinp, DVec(b.dinp.begin(), b.dinp.end())), 2 * bound(s.OC)) << "dinp";
    EXPECT_LE(rel_frobenius(a.dw, DVec(b.dw.begin(), b.dw.end())), 2 * bound(s.N + 1)) << "dw";
    EXPECT_EQ(a.dbias, b.dbias) << "dbias: the same loop on both paths";
  }
}

// Operands that are not bf16 values: the bf16 path rounds them (as a GPU's conversion does), so
// it matches the reference of the rounded operands, and not the fp32 ones (off by ~2^-9) — which
// shows the product really ran in bf16.
TEST(CpuBf16Gemm, RoundsOperandsThatAreNotBf16) {
  CpuBackend<float> be(2, Precision::Bf16);
  if (!be.bf16_gemms()) GTEST_SKIP() << "this CPU has no bf16 instructions: sgemm runs instead";
  const int N = 64, IC = 200, OC = 72;
  const FVec inp = random_values(N * IC, 21, false), w = random_values(OC * IC, 22, false);
  FVec out(N * OC);
  be.matmul_forward(out.data(), inp.data(), w.data(), nullptr, N, IC, OC);
  const FVec zero_dout(N * OC, 0.0f), zero_w(OC * IC, 0.0f), zero_b(OC, 0.0f);
  const Reference of_rounded(rounded(inp), rounded(w), nullptr, zero_dout, zero_w, zero_b, N, IC,
                             OC);
  const Reference of_fp32(inp, w, nullptr, zero_dout, zero_w, zero_b, N, IC, OC);
  EXPECT_LE(rel_frobenius(out, of_rounded.out), bound(IC));
  EXPECT_GT(rel_frobenius(out, of_fp32.out), 1e-4);
}

// The fallback of CPUs without bf16 instructions (AVX2-only ones; forced elsewhere by capping
// oneDNN's ISA at AVX2 before its first use): the backend says once why, reports no bf16 GEMMs,
// and runs the blocked sgemm, which on these shapes (each product one tile) is the fp32 sgemm
// path's, bit for bit, on bf16 values and on others alike (it does not round operands: the
// model's own rounding of activations and weights is what makes them bf16). Multi-tile shapes:
// test_cpu_storage.cpp. In a process that has used oneDNN already (the whole binary run at once,
// not ctest's one test per process) the cap is refused, and the test runs itself in a fresh
// process.
TEST(CpuBf16Gemm, FallbackWithoutBf16InstructionsIsTheSgemmPathBitForBit) {
  if (dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2) != dnnl::status::success) {
    const testing::TestInfo* me = testing::UnitTest::GetInstance()->current_test_info();
    const std::string command =
        std::filesystem::read_symlink("/proc/self/exe").string() +
        " --gtest_brief=1 --gtest_filter=" + std::string(me->test_suite_name()) + "." + me->name();
    const int status = std::system(command.c_str());
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "in a fresh process (" << command << "): status " << status;
    return;
  }
  testing::internal::CaptureStderr();
  CpuBackend<float> fallback(2, Precision::Bf16), sgemm(2);
  const std::string said = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(fallback.bf16_gemms());
  EXPECT_NE(said.find("bf16 GEMMs: this CPU has no bf16 instructions"), std::string::npos) << said;
  EXPECT_NE(said.find("running blocked fp32 sgemm on the bf16 values instead"), std::string::npos)
      << said;
  for (const Shape& s : kShapes) {
    SCOPED_TRACE(name(s));
    const size_t ni = static_cast<size_t>(s.N) * s.IC, nw = static_cast<size_t>(s.OC) * s.IC,
                 no = static_cast<size_t>(s.N) * s.OC;
    for (const bool bf16_values : {true, false}) {
      SCOPED_TRACE(bf16_values ? "bf16 values" : "fp32 values");
      const FVec inp = random_values(ni, 41, bf16_values), w = random_values(nw, 42, bf16_values),
                 bias = random_values(s.OC, 43, bf16_values),
                 dout = random_values(no, 44, bf16_values), dw0 = random_values(nw, 45, false),
                 dbias0 = random_values(s.OC, 46, false);
      const Result a = run(fallback, inp, w, &bias, dout, dw0, dbias0, s.N, s.IC, s.OC);
      const Result b = run(sgemm, inp, w, &bias, dout, dw0, dbias0, s.N, s.IC, s.OC);
      EXPECT_EQ(a.out, b.out);
      EXPECT_EQ(a.dinp, b.dinp);
      EXPECT_EQ(a.dw, b.dw);
      EXPECT_EQ(a.dbias, b.dbias);
    }
  }
}

// Whether the cap a user may set in ONEDNN_MAX_CPU_ISA (oneDNN's names, any case) lets bf16
// kernels run: the caps from AVX512_CORE_BF16 up, or no cap.
bool isa_cap_allows_bf16() {
  const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (cap == nullptr || *cap == '\0') return true;
  std::string name(cap);
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const char* allows : {"AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX", "ALL"})
    if (name == allows) return true;
  return false;
}

// The CPU's flags, under the user's cap (ONEDNN_MAX_CPU_ISA=AVX2 on this CPU: the fall-back).
TEST(CpuBf16Gemm, Bf16KernelsExactlyWhereTheCpuHasThem) {
  EXPECT_EQ(CpuBackend<float>(1, Precision::Bf16).bf16_gemms(),
            __builtin_cpu_supports("avx512bf16") && isa_cap_allows_bf16());
  EXPECT_FALSE(CpuBackend<float>(1, Precision::Fp16).bf16_gemms());
  EXPECT_FALSE(CpuBackend<float>(1, Precision::Fp32).bf16_gemms());
  EXPECT_FALSE(CpuBackend<float>(1).bf16_gemms());
  EXPECT_THROW(CpuBackend<double>(1, Precision::Bf16), Error);
}

// Products whose longest dimension exceeds 4 chunks run in pieces along it (cpu_matmul_bf16.hpp):
// with a chunk of 16, each split (along N, M, K; both transpositions; fp32 and bf16 C, with and
// without accumulation) against the double reference. A bf16 C is the fp32 result rounded once:
// along K the pieces add up in fp32, so it equals the fp32 C of the same call rounded, bit for bit.
TEST(CpuBf16Gemm, ProductsInPiecesMatchDoubleReference) {
  cpu::Bf16Matmul pieces(16);
  if (!pieces.native()) GTEST_SKIP() << "this CPU has no bf16 instructions: sgemm runs instead";
  struct Case {
    const char* along;
    bool ta, tb;
    int M, N, K;
  };
  const Case cases[] = {{"N", false, true, 9, 150, 24},   {"N", true, false, 7, 131, 20},
                        {"M", true, false, 150, 20, 9},   {"M", false, true, 140, 12, 17},
                        {"K", false, false, 12, 10, 150}, {"K", true, true, 11, 13, 170}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("along ") + c.along + " M=" + std::to_string(c.M) +
                 " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K));
    const size_t mk = static_cast<size_t>(c.M) * c.K, kn = static_cast<size_t>(c.K) * c.N,
                 mn = static_cast<size_t>(c.M) * c.N;
    const FVec a = random_values(mk, 51), b = random_values(kn, 52), c0 = random_values(mn, 53);
    const std::vector<uint16_t> a16 = bits(a), b16 = bits(b), c016 = bits(c0);
    for (const bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      DVec ref(mn);
      for (int m = 0; m < c.M; ++m)
        for (int n = 0; n < c.N; ++n) {
          double s = accumulate ? c0[static_cast<size_t>(m) * c.N + n] : 0.0;
          for (int k = 0; k < c.K; ++k)
            s +=
                static_cast<double>(
                    a[c.ta ? static_cast<size_t>(k) * c.M + m : static_cast<size_t>(m) * c.K + k]) *
                b[c.tb ? static_cast<size_t>(n) * c.K + k : static_cast<size_t>(k) * c.N + n];
          ref[static_cast<size_t>(m) * c.N + n] = s;
        }
      FVec c32(c0);
      std::vector<uint16_t> c16(c016);
      ASSERT_TRUE(pieces.multiply(c.ta, c.tb, c.M, c.N, c.K, a16.data(), b16.data(), accumulate,
                                  c32.data()));
      ASSERT_TRUE(pieces.multiply(c.ta, c.tb, c.M, c.N, c.K, a16.data(), b16.data(), accumulate,
                                  c16.data()));
      EXPECT_LE(rel_frobenius(c32, ref), bound(c.K + 1)) << "fp32 C";
      FVec widened(mn);
      for (size_t i = 0; i < mn; ++i) widened[i] = from_bf16_bits(c16[i]);
      EXPECT_LE(rel_frobenius(widened, ref), std::ldexp(1.0, -9)) << "bf16 C: one rounding";
      if (c.along[0] == 'K') {
        EXPECT_EQ(c16, bits(c32)) << "bf16 C = the fp32 C rounded once";
      }
    }
  }
}

// A bias given to oneDNN (the forward's, bf16 or fp32) is added to the finished fp32 sum, before
// the one rounding: the bits of C pre-filled with the bias and the product added onto it (the
// path before, and still the blocked sgemm's), whole and in pieces along N and M; along K (the
// sum in pieces) the bias is refused and the caller pre-fills.
TEST(CpuBf16Gemm, BiasAddedOnceToTheFp32Sum) {
  cpu::Bf16Matmul mm(16);
  if (!mm.native()) GTEST_SKIP() << "this CPU has no bf16 instructions: sgemm runs instead";
  using Bias = cpu::Bf16Matmul::Bias;
  struct Case {
    int M, N, K;
  };
  for (const Case c : {Case{9, 40, 24}, Case{9, 150, 24}, Case{150, 20, 9}}) {  // whole, N, M
    SCOPED_TRACE("M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
                 " K=" + std::to_string(c.K));
    const size_t mn = static_cast<size_t>(c.M) * c.N;
    const FVec a = random_values(static_cast<size_t>(c.M) * c.K, 61),
               b = random_values(static_cast<size_t>(c.N) * c.K, 62), bias = random_values(c.N, 63);
    const std::vector<uint16_t> a16 = bits(a), b16 = bits(b), bias16 = bits(bias);
    FVec filled(mn);  // C pre-filled with the bias
    for (size_t i = 0; i < mn; ++i) filled[i] = bias[i % c.N];
    FVec c32(filled), biased32(mn, 9.0f);
    std::vector<uint16_t> c16 = bits(filled), biased16(mn, 1);
    ASSERT_TRUE(mm.multiply(false, true, c.M, c.N, c.K, a16.data(), b16.data(), true, c32.data()));
    ASSERT_TRUE(mm.multiply(false, true, c.M, c.N, c.K, a16.data(), b16.data(), true, c16.data()));
    for (const Bias type : {Bias::Bf16, Bias::Fp32}) {
      const void* row = type == Bias::Bf16 ? static_cast<const void*>(bias16.data()) : bias.data();
      ASSERT_TRUE(mm.multiply_biased(false, true, c.M, c.N, c.K, a16.data(), b16.data(), row, type,
                                     biased32.data(), false));
      ASSERT_TRUE(mm.multiply_biased(false, true, c.M, c.N, c.K, a16.data(), b16.data(), row, type,
                                     biased16.data(), true));
      EXPECT_EQ(biased32, c32) << "fp32 C";
      EXPECT_EQ(biased16, c16) << "bf16 C";
    }
  }
  EXPECT_FALSE(mm.has_kernel(false, true, 4, 8, 100, false, true, Bias::Bf16)) << "along K";
}

// An untransposed B packed by a reorder of its own first (cpu_matmul_bf16.hpp) gives the bits of
// the matmul reading it in place: whole, in pieces along M (the packed B reused piece after
// piece), N and K, fp32 and bf16 C, with and without accumulation. B's values changed in place
// between two calls of the same shape are packed again, never read from the last call's copy.
TEST(CpuBf16Gemm, PackingBChangesNoBit) {
  cpu::Bf16Matmul packed(16), in_place(16, /*pack_b=*/false);
  if (!packed.native()) GTEST_SKIP() << "this CPU has no bf16 instructions: sgemm runs instead";
  struct Case {
    const char* split;
    bool ta;
    int M, N, K;
  };
  const Case cases[] = {{"whole", false, 40, 48, 32},
                        {"whole", true, 33, 40, 24},
                        {"M", true, 150, 20, 9},
                        {"N", false, 9, 150, 24},
                        {"K", false, 12, 10, 150}};
  uint64_t seed = 70;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.split) + (c.ta ? " ta" : "") + " M=" + std::to_string(c.M) +
                 " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K));
    const size_t mn = static_cast<size_t>(c.M) * c.N;
    const std::vector<uint16_t> a = bits(random_values(static_cast<size_t>(c.M) * c.K, ++seed)),
                                c0 = bits(random_values(mn, ++seed));
    std::vector<uint16_t> b = bits(random_values(static_cast<size_t>(c.K) * c.N, ++seed));
    for (const bool accumulate : {false, true})
      for (int round = 0; round < 2; ++round) {  // round 1: B changed in place
        SCOPED_TRACE(std::string(accumulate ? "accumulate" : "overwrite") + " round " +
                     std::to_string(round));
        if (round == 1)
          for (uint16_t& x : b) x ^= 0x8000;  // every sign flipped
        FVec c32(mn, 0.5f), ref32(c32);
        std::vector<uint16_t> c16(c0), ref16(c0);
        const auto into = [&](auto& out, auto& ref) {
          ASSERT_TRUE(packed.multiply(c.ta, false, c.M, c.N, c.K, a.data(), b.data(), accumulate,
                                      out.data()));
          ASSERT_TRUE(in_place.multiply(c.ta, false, c.M, c.N, c.K, a.data(), b.data(), accumulate,
                                        ref.data()));
        };
        // the last call of round 0 and the first of round 1 take the same plan and B's pointer
        if (round == 0) into(c32, ref32);
        into(c16, ref16);
        if (round == 1) into(c32, ref32);
        EXPECT_EQ(c32, ref32) << "fp32 C";
        EXPECT_EQ(c16, ref16) << "bf16 C";
      }
  }
}

// b_unchanged (the bf16 peak's trials, bf16_gemm_rate.hpp): the B packed by the previous call
// is reused for the same pointer and shape, with no reorder (B's signs flipped in place between
// the calls, the old product is the proof that none ran); another B, or the same B without the
// flag, is packed again.
TEST(CpuBf16Gemm, UnchangedBReusesItsPackedCopy) {
  cpu::Bf16Matmul bf16;
  if (!bf16.native()) GTEST_SKIP() << "this CPU has no bf16 instructions: sgemm runs instead";
  const int M = 24, N = 40, K = 32;
  const std::vector<uint16_t> a = bits(random_values(static_cast<size_t>(M) * K, 81));
  std::vector<uint16_t> b = bits(random_values(static_cast<size_t>(K) * N, 82)), b2(b);
  const auto product = [&](const std::vector<uint16_t>& with, bool b_unchanged) {
    FVec c(static_cast<size_t>(M) * N);
    EXPECT_TRUE(
        bf16.multiply(false, false, M, N, K, a.data(), with.data(), false, c.data(), b_unchanged));
    return c;
  };
  const FVec first = product(b, false);
  FVec negated(first);
  for (float& x : negated) x = -x;
  for (uint16_t& x : b) x ^= 0x8000;  // every sign flipped, in place
  EXPECT_EQ(product(b, true), first) << "the packed copy of the last call";
  EXPECT_EQ(product(b2, true), first) << "another B (the old values) is packed";
  EXPECT_EQ(product(b, true), negated) << "b's new values, packed again after b2";
  EXPECT_EQ(product(b, false), negated);
}

// Which of oneDNN's kernels runs a product (cpu_matmul_bf16.hpp): the jit gemm where every
// dimension is at least 512 and the CPU has no AMX, else the brgemm; the bf16 peak's Bf16Matmul
// (Kernels::Brgemm) always the brgemm.
TEST(CpuBf16Gemm, LargeProductsRunTheJitGemmOthersTheBrgemm) {
  EXPECT_TRUE(cpu::jit_gemm_pays(1024, 3072, 768, false)) << "GPT-2 small's fc at 1024 tokens";
  EXPECT_TRUE(cpu::jit_gemm_pays(512, 512, 512, false));
  EXPECT_FALSE(cpu::jit_gemm_pays(511, 4096, 4096, false));
  EXPECT_FALSE(cpu::jit_gemm_pays(4096, 511, 4096, false));
  EXPECT_FALSE(cpu::jit_gemm_pays(4096, 4096, 511, false));
  EXPECT_FALSE(cpu::jit_gemm_pays(4096, 4096, 4096, true)) << "AMX: its brgemm";

  cpu::Bf16Matmul by_shape, brgemm(cpu::Bf16Matmul::kChunk, true, cpu::Bf16Matmul::Kernels::Brgemm);
  if (!by_shape.native()) GTEST_SKIP() << "this CPU has no bf16 instructions: sgemm runs instead";
  const bool amx = cpu::onednn_has(dnnl::cpu_isa::avx512_core_amx);
  const auto brg = [](const std::string& kernel) { return kernel.rfind("brg:", 0) == 0; };
  // GPT-2 small's fc at 1024 tokens: forward, dinp, dW
  for (const auto& [ta, tb, M, N, K, accumulate] :
       {std::tuple{false, true, 1024, 3072, 768, false},
        std::tuple{false, false, 1024, 768, 3072, false},
        std::tuple{true, false, 3072, 768, 1024, true}}) {
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
    const std::string chosen = by_shape.kernel(ta, tb, M, N, K, accumulate);
    if (amx)
      EXPECT_TRUE(brg(chosen)) << chosen;
    else
      EXPECT_EQ(chosen, "gemm:jit");
    EXPECT_TRUE(brg(brgemm.kernel(ta, tb, M, N, K, accumulate))) << "the peak's";
  }
  EXPECT_TRUE(brg(by_shape.kernel(false, true, 256, 3072, 768))) << "256 tokens";
}

}  // namespace
}  // namespace mpitrain
