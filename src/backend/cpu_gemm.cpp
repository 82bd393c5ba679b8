// CPU backend: the fp32 matrix product (see cpu_kernels.hpp).
#include <oneapi/dnnl/dnnl_debug.h>

#include <string>

#include "cpu_kernels.hpp"
#include "cpu_matmul_bf16.hpp"
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

}  // namespace

const char* cpu_sgemm_library() { return onednn_sgemm() ? "oneDNN sgemm" : "OpenBLAS sgemm"; }

namespace cpu {

// Inside a parallel region (attention's loop over heads) either library runs the product on the
// calling thread. oneDNN's results are the same bits at 1 and 2 threads, OpenBLAS's are not
// (tests/unit/test_cpu_gemm.cpp): only on an AVX2 CPU do a run's numbers depend on --threads.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha, const float* A,
          int lda, const float* B, int ldb, float beta, float* C, int ldc) {
  if (!onednn_sgemm()) {
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  const dnnl_status_t status =
      dnnl_sgemm(ta == CblasTrans ? 'T' : 'N', tb == CblasTrans ? 'T' : 'N', M, N, K, alpha, A, lda,
                 B, ldb, beta, C, ldc);
  if (status != dnnl_success)
    MPITRAIN_THROW("oneDNN sgemm (M " + std::to_string(M) + ", N " + std::to_string(N) + ", K " +
                   std::to_string(K) + "): " + dnnl_status2str(status));
}

}  // namespace cpu

}  // namespace mpitrain
