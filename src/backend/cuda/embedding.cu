// CUDA kernels: the vocabulary-parallel embedding (this rank holds wte rows [v0, v0 + Vl)).
#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

__device__ __forceinline__ bool holds(int32_t token, int v0, int Vl) {
  return static_cast<uint32_t>(token - v0) < static_cast<uint32_t>(Vl);
}

// out[n,c] = (wte[tok - v0, c] if held, else 0) + (wpe[n % T, c] if wpe)
__global__ void embedding_forward_kernel(Out out, const int32_t* tokens, In wte, In wpe, int N,
                                         int T, int C, int v0, int Vl) {
  const size_t total = size_t(N) * C;
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < total;
       i += size_t{gridDim.x} * blockDim.x) {
    const size_t n = i / C, c = i % C;
    const int32_t tok = tokens[n];
    float v = holds(tok, v0, Vl) ? wte[size_t(tok - v0) * C + c] : 0.0f;
    if (wpe != nullptr) v += wpe[(n % T) * C + c];
    out[i] = v;
  }
}

// one block per row n: dwte[tok - v0, :] += dout[n, :] (atomic: tokens repeat)
__global__ void embedding_backward_kernel(float* dwte, In dout, const int32_t* tokens, int C,
                                          int v0, int Vl) {
  const int n = blockIdx.x;
  const int32_t tok = tokens[n];
  if (!holds(tok, v0, Vl)) return;
  float* row = dwte + size_t(tok - v0) * C;
  const In d = dout + size_t(n) * C;
  for (int c = threadIdx.x; c < C; c += blockDim.x) atomicAdd(row + c, d[c]);
}

}  // namespace

void launch_embedding_forward(Out out, const int32_t* tokens, In wte, In wpe, int B, int T, int C,
                              int v0, int Vl, cudaStream_t s) {
  const size_t n = size_t(B) * T * C;
  if (n == 0) return;
  embedding_forward_kernel<<<grid_for(n), kThreads, 0, s>>>(out, tokens, wte, wpe, B * T, T, C, v0,
                                                            Vl);
  CUDA_CHECK_LAUNCH();
}

void launch_embedding_backward_wte(float* dwte, In dout, const int32_t* tokens, int N, int C,
                                   int v0, int Vl, cudaStream_t s) {
  if (N == 0 || C == 0) return;
  embedding_backward_kernel<<<N, kThreads, 0, s>>>(dwte, dout, tokens, C, v0, Vl);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
