// cuBLASLt matmuls in column-major terms: D(m,n) = op(A)(m,k) op(B)(k,n) [+ bias(m) per column]
// [+ C, with C = D], fp32 accumulation. A and B are fp32, or bf16/fp16 (tensors as they lie in
// memory, or copies); D and the bias fp32 or the A/B type. The
// descriptors, layouts and the algorithm (heuristics, best first) are made once per distinct
// call shape — sizes, types, transposes, epilogue, accumulate, pointer alignments — and cached.
#pragma once

#include <cublasLt.h>

#include <map>
#include <memory>
#include <tuple>

namespace mpitrain::cuda {

struct LtCall {
  bool trans_a, trans_b;
  int m, n, k;
  cudaDataType_t ab_type;  // CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F
  cublasComputeType_t compute;
  const void* A;
  int lda;
  const void* B;
  int ldb;
  void* D;
  cudaDataType_t d_type;  // CUDA_R_32F or ab_type
  int ldd;
  const void* bias;  // null: no epilogue
  cudaDataType_t bias_type;
  bool accumulate;    // D += product
};

class LtGemm {
 public:
  LtGemm(cublasLtHandle_t handle, void* workspace, size_t workspace_bytes);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  // false when cuBLASLt has no algorithm for the call (remembered; the caller falls back).
  bool run(const LtCall& call, cudaStream_t stream);

 private:
  struct Plan;
  using Key = std::tuple<bool, bool, int, int, int, int, int, int, int, int, bool, bool, int, int,
                         int, int, int>;
  cublasLtHandle_t handle_;
  void* workspace_;
  size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
};

}  // namespace mpitrain::cuda
