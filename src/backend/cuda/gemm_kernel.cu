// CUDA kernel: our own GEMM (the `cuda` kernel set, and the fall-back where cuBLASLt offers no
// algorithm). 64 x 64 tiles of C per block of 256 threads, 16-deep slices of A and B through
// shared memory, 4 x 4 results per thread, fp32 accumulation. Operands are read through general
// strides (so one kernel serves x W^T, dY W and dY^T x) and rounded to the requested precision
// as they are loaded, which is what the bf16/fp16 GEMM math means.
#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

constexpr int BM = 64, BN = 64, BK = 16, kGemmThreads = 256;

__global__ void __launch_bounds__(kGemmThreads)
    gemm_kernel(Out C, In A, In B, In bias, int M, int N, int K, long sam, long sak, long sbk,
                long sbn, int ldc, bool accumulate, Precision p) {
  __shared__ float As[BK][BM + 1];
  __shared__ float Bs[BK][BN + 1];
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += BK) {
    // load: the index that is contiguous in memory runs fastest across the threads
    for (int e = tid; e < BM * BK; e += kGemmThreads) {
      const int mm = sak == 1 ? e / BK : e % BM, kk = sak == 1 ? e % BK : e / BM;
      const int m = m0 + mm, k = k0 + kk;
      As[kk][mm] = m < M && k < K ? round_to_device(A[m * sam + k * sak], p) : 0.0f;
    }
    for (int e = tid; e < BN * BK; e += kGemmThreads) {
      const int nn = sbn == 1 ? e % BN : e / BK, kk = sbn == 1 ? e / BN : e % BK;
      const int n = n0 + nn, k = k0 + kk;
      Bs[kk][nn] = n < N && k < K ? round_to_device(B[k * sbk + n * sbn], p) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < BK; ++kk) {
      float a[4], b[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) b[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int m = m0 + ty + 16 * i;
    if (m >= M) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = n0 + tx + 16 * j;
      if (n >= N) continue;
      float c = acc[i][j];
      if (bias != nullptr) c += bias[n];
      const size_t at = size_t(m) * ldc + n;
      C[at] = accumulate ? C[at] + c : c;
    }
  }
}

}  // namespace

void launch_gemm(Out C, In A, In B, In bias, int M, int N, int K, long sam, long sak, long sbk,
                 long sbn, int ldc, bool accumulate, Precision operands, cudaStream_t s) {
  if (M == 0 || N == 0) return;
  const dim3 grid((N + BN - 1) / BN, (M + BM - 1) / BM);
  gemm_kernel<<<grid, kGemmThreads, 0, s>>>(C, A, B, bias, M, N, K, sam, sak, sbk, sbn, ldc,
                                            accumulate, operands);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
