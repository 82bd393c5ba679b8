// CPU backend: the fp32 matrix product (see cpu_kernels.hpp).
#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <string>

#include "cpu_kernels.hpp"
#include "cpu_matmul_bf16.hpp"
#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// oneDNN before 3.11.2 points the stack pointer into the heap inside its AVX-512 f32 GEMM kernel:
// a signal handled there (SIGTERM of a preemption) writes its frame over heap memory (oneDNN
// issue #4845). Seen here with Debian's 2.6.3: e2e_preemption aborted in 2 of about 40 runs with
// "corrupted size vs. prev_size" inside dnnl_sgemm.
bool signal_safe_onednn() {
  const dnnl_version_t* v = dnnl_version();
  return v->major > 3 || (v->major == 3 && (v->minor > 11 || (v->minor == 11 && v->patch >= 2)));
}

// Whether oneDNN runs AVX-512 kernels here and is one that survives a signal: decided once, so
// every product of a process takes the same library.
bool onednn_sgemm() {
  static const bool use = cpu::onednn_has(dnnl::cpu_isa::avx512_core) && signal_safe_onednn();
  return use;
}

// What OpenBLAS's cblas_sgemm refuses (its xerbla prints to stderr and returns, C untouched), in
// its own terms, for a row-major product: sizes below 0, a leading dimension below a row.
std::string openblas_refusal(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, int lda,
                             int ldb, int ldc) {
  const auto below = [](const char* name, int value, int least) {
    return name + std::string(" ") + std::to_string(value) + " < " + std::to_string(least);
  };
  if (M < 0 || N < 0 || K < 0) return "a negative size";
  if (const int a = std::max(1, ta == CblasTrans ? M : K); lda < a) return below("lda", lda, a);
  if (const int b = std::max(1, tb == CblasTrans ? K : N); ldb < b) return below("ldb", ldb, b);
  if (const int c = std::max(1, N); ldc < c) return below("ldc", ldc, c);
  return {};
}

std::string shape(int M, int N, int K) {
  return "(M " + std::to_string(M) + ", N " + std::to_string(N) + ", K " + std::to_string(K) + ")";
}

}  // namespace

const char* cpu_sgemm_library() { return onednn_sgemm() ? "oneDNN sgemm" : "OpenBLAS sgemm"; }

std::string cpu_sgemm_kernel() {
  return onednn_sgemm() ? cpu_sgemm_library()
                        : cpu_sgemm_library() + std::string(" ") + openblas_get_corename();
}

std::string cpu_sgemm_in_use() {
  return onednn_sgemm() ? cpu_sgemm_library() : describe(blas_kernel());
}

std::string cpu_sgemm_reason() {
  const dnnl_version_t* v = dnnl_version();
  const std::string onednn = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
                             "." + std::to_string(v->patch);
  if (!cpu::onednn_has(dnnl::cpu_isa::avx512_core))
    return onednn + " has no AVX-512 kernels for this CPU; on AVX2 OpenBLAS is as fast";
  if (!signal_safe_onednn())
    return onednn + " is older than 3.11.2: its AVX-512 sgemm corrupts the heap when a signal " +
           "arrives inside it (oneDNN issue #4845)";
  return onednn + " has AVX-512 kernels for this CPU and survives signals";
}

namespace cpu {

// Inside a parallel region (attention's loop over heads) either library runs the product on the
// calling thread. oneDNN's results are the same bits at 1 and 2 threads, OpenBLAS's are not
// (tests/unit/test_cpu_gemm.cpp): only on an AVX2 CPU do a run's numbers depend on --threads.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
          int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (!onednn_sgemm()) {
    if (const std::string refused = openblas_refusal(ta, tb, M, N, K, lda, ldb, ldc);
        !refused.empty())
      MPITRAIN_THROW("OpenBLAS sgemm " + shape(M, N, K) + ": " + refused);
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const dnnl_status_t status =
      dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', M, N, K, alpha, A, lda,
                 B, ldb, beta, C, ldc);
  if (status != dnnl_success)
    MPITRAIN_THROW("oneDNN sgemm " + shape(M, N, K) + ": " + dnnl_status2str(status));
}

}  // namespace cpu

}  // namespace mpitrain
