// CPU backend: the fp32 matrix product (see cpu_kernels.hpp).
#include <oneapi/dnnl/dnnl_debug.h>

#include <string>

#include "cpu_kernels.hpp"
#include "cpu_matmul_bf16.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// Whether oneDNN runs AVX-512 kernels here: decided once, from the CPU, so every product of a
// process takes the same library.
bool onednn_sgemm() {
  static const bool avx512 = cpu::onednn_has(dnnl::cpu_isa::avx512_core);
  return avx512;
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
