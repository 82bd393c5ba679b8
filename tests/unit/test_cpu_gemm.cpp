// The CPU backend's fp32 product (src/backend/cpu_gemm.cpp: oneDNN's sgemm where oneDNN has
// AVX-512 kernels, else OpenBLAS's): every transpose combination against a double-precision
// reference, alpha and beta honoured; with oneDNN the same bits at 1 and 2 threads (what keeps a
// run's results independent of --threads); either library's refusals as an Error that says why.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "../../src/backend/cpu_kernels.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/runtime/error.hpp"

using mpitrain::cpu::gemm;

namespace {

struct Case {
  bool ta, tb;
  int M, N, K;
};

std::vector<float> values(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

// C = alpha op(A) op(B) + beta C0 with the sgemm; lda / ldb as the backend passes them.
std::vector<float> product(const Case& c, const std::vector<float>& A, const std::vector<float>& B,
                           float alpha, float beta, std::vector<float> C) {
  gemm(c.ta ? CblasTrans : CblasNoTrans, c.tb ? CblasTrans : CblasNoTrans, c.M, c.N, c.K, alpha,
       A.data(), c.ta ? c.M : c.K, B.data(), c.tb ? c.K : c.N, beta, C.data(), c.N);
  return C;
}

}  // namespace

TEST(CpuGemm, EveryTransposeAgainstDouble) {
  for (const Case c : {Case{false, false, 37, 29, 53}, Case{false, true, 64, 48, 96},
                       Case{true, false, 33, 70, 41}, Case{true, true, 16, 17, 300}}) {
    const auto A = values(static_cast<size_t>(c.M) * c.K, 1),
               B = values(static_cast<size_t>(c.K) * c.N, 2),
               C0 = values(static_cast<size_t>(c.M) * c.N, 3);
    const std::vector<float> C = product(c, A, B, 0.5f, 2.0f, C0);
    for (int m = 0; m < c.M; ++m)
      for (int n = 0; n < c.N; ++n) {
        double ref = 0, mag = 0;
        for (int k = 0; k < c.K; ++k) {
          const double a =
              c.ta ? A[static_cast<size_t>(k) * c.M + m] : A[static_cast<size_t>(m) * c.K + k];
          const double b =
              c.tb ? B[static_cast<size_t>(n) * c.K + k] : B[static_cast<size_t>(k) * c.N + n];
          ref += a * b;
          mag += std::fabs(a * b);
        }
        const size_t i = static_cast<size_t>(m) * c.N + n;
        ref = 0.5 * ref + 2.0 * C0[i];
        mag = 0.5 * mag + 2.0 * std::fabs(C0[i]);
        // fp32 products summed over K terms: error <= ~K * 2^-24 of the terms' magnitudes;
        // measured at most ~3e-7 of mag here, allowed 4e-6 (K up to 300)
        ASSERT_NEAR(C[i], ref, 4e-6 * mag) << c.ta << c.tb << " " << m << "," << n;
      }
  }
}

TEST(CpuGemm, SameBitsAtOneAndTwoThreads) {
  if (std::string(mpitrain::cpu_sgemm_library()) != "oneDNN sgemm")
    GTEST_SKIP() << "this CPU runs " << mpitrain::cpu_sgemm_library() << " ("
                 << mpitrain::cpu_sgemm_reason()
                 << "), whose results differ with the thread count (measured on all three shapes "
                    "under forced AVX2 kernels); only oneDNN's are promised the same bits";
  const int saved = omp_get_max_threads();
  // a weight gradient (K = tokens), a K-heavy dinp of the vocabulary, a forward product
  for (const Case c : {Case{true, false, 384, 128, 1024}, Case{false, false, 64, 128, 8192},
                       Case{false, true, 256, 384, 128}}) {
    const auto A = values(static_cast<size_t>(c.M) * c.K, 4),
               B = values(static_cast<size_t>(c.K) * c.N, 5);
    const std::vector<float> zero(static_cast<size_t>(c.M) * c.N, 0.0f);
    omp_set_num_threads(1);
    const std::vector<float> one = product(c, A, B, 1.0f, 0.0f, zero);
    omp_set_num_threads(2);
    const std::vector<float> two = product(c, A, B, 1.0f, 0.0f, zero);
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0)
        << c.M << " x " << c.N << " x " << c.K;
  }
  omp_set_num_threads(saved);
}

// Both libraries' refusals, on the one this CPU runs: oneDNN's status text, or for OpenBLAS (whose
// xerbla only prints) the same rule it applies, checked before the call.
TEST(CpuGemm, RefusedArgumentsSayWhy) {
  const std::string library = mpitrain::cpu_sgemm_library();
  const std::string why = library == "oneDNN sgemm" ? "invalid_arguments" : "lda 1 < 4";
  std::vector<float> A(16), B(16), C(16, 7.0f);
  try {  // lda 1 < K 4
    gemm(CblasNoTrans, CblasNoTrans, 4, 4, 4, 1.0f, A.data(), 1, B.data(), 4, 0.0f, C.data(), 4);
    FAIL() << library << ": no error";
  } catch (const mpitrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find(library + " (M 4, N 4, K 4): " + why), std::string::npos)
        << e.what();
  }
  try {  // ldc 3 < N 4, with B transposed: ldb 4 >= K 4 passes
    gemm(CblasNoTrans, CblasTrans, 4, 4, 4, 1.0f, A.data(), 4, B.data(), 4, 0.0f, C.data(), 3);
    FAIL() << library << ": no error";
  } catch (const mpitrain::Error& e) {
    EXPECT_NE(std::string(e.what()).find(library + " (M 4, N 4, K 4): "), std::string::npos)
        << e.what();
  }
}
