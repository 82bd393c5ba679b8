#include "lt_gemm.hpp"

#include <cstdint>

#include "mpitrain/backend/cuda/check.hpp"

namespace mpitrain::cuda {

namespace {
// The largest power of two (<= 256) dividing the address: what the algorithm may assume.
int alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}
}  // namespace

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  ~Plan() {
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

LtGemm::LtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes)
    : handle_(handle), workspace_(workspace), workspace_bytes_(workspace_bytes) {}

LtGemm::~LtGemm() = default;

bool LtGemm::run(const LtCall& c, cudaStream_t stream) {
  const int align_a = alignment(c.A), align_b = alignment(c.B), align_d = alignment(c.D);
  const int align_bias = c.bias ? alignment(c.bias) : 0;
  const Key key{c.trans_a,
                c.trans_b,
                c.m,
                c.n,
                c.k,
                c.ab_type,
                c.compute,
                c.lda,
                c.ldb,
                c.ldd,
                c.bias != nullptr,
                c.accumulate,
                align_a,
                align_b,
                std::min(align_d, align_bias ? align_bias : 256),
                c.d_type,
                c.bias ? c.bias_type : 0};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    auto plan = std::make_unique<Plan>();
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, c.compute, CUDA_R_32F));
    const cublasOperation_t ta = c.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = c.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    const cublasLtEpilogue_t epilogue = c.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                &epilogue, sizeof epilogue));
    if (c.bias) {
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                  &c.bias_type, sizeof c.bias_type));
      CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                  &c.bias, sizeof c.bias));
    }
    // stored (column-major) shapes: op(A) is m x k, so A is k x m when transposed
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, c.ab_type, c.trans_a ? c.k : c.m,
                                            c.trans_a ? c.m : c.k, c.lda));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, c.ab_type, c.trans_b ? c.n : c.k,
                                            c.trans_b ? c.k : c.n, c.ldb));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->d, c.d_type, c.m, c.n, c.ldd));

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = workspace_bytes_;
    const uint32_t aa = align_a, ab = align_b, ad = std::get<14>(key);
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                                &aa, sizeof aa);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                                &ab, sizeof ab);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                &ad, sizeof ad);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                                &ad, sizeof ad);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->d, plan->d,
                                          pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED)
      throw_cublas(st, "cublasLtMatmulAlgoGetHeuristic", __FILE__, __LINE__);
    plan->ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (plan->ok) plan->algo = result.algo;
    it = plans_.emplace(key, std::move(plan)).first;
  }
  Plan& plan = *it->second;
  if (!plan.ok) return false;
  if (c.bias)
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                &c.bias, sizeof c.bias));
  const float alpha = 1.0f, beta = c.accumulate ? 1.0f : 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, c.A, plan.a, c.B, plan.b, &beta, c.D,
                              plan.d, c.D, plan.d, &plan.algo, workspace_, workspace_bytes_,
                              stream));
  return true;
}

}  // namespace mpitrain::cuda
