// CUDA kernels: vocabulary-parallel softmax cross-entropy in the CPU backend's three phases
// (cpu_crossentropy.cpp), one block per row; the logits are read once per phase and the
// probabilities are never stored: phase 3 turns the logits into their gradient in place.
// Local column j is real iff j < R = clamp(V - v0, 0, Vl).
#include <cfloat>

#include "common.cuh"
#include "kernels.hpp"
#include "mpitrain/backend/unscored.hpp"

namespace mpitrain::cuda {

namespace {

__device__ __forceinline__ int real_columns(int Vl, int v0, int V) {
  return min(max(V - v0, 0), Vl);
}

__global__ void ce_row_max_kernel(In logits, float* row_max, int Vl, int v0, int V) {
  __shared__ float sh[32];
  const int n = blockIdx.x, R = real_columns(Vl, v0, V);
  const In x = logits + size_t(n) * Vl;
  float m = -INFINITY;
  for (int j = threadIdx.x; j < R; j += blockDim.x) m = fmaxf(m, x[j]);
  m = block_max(m, sh);
  if (threadIdx.x == 0) row_max[n] = m;
}

// stats[n] = sum_{j<R} e^(x_j - m) (summed in double), stats[N + n] = x_target or 0
__global__ void ce_stats_kernel(In logits, const float* row_max, const int32_t* targets,
                                float* stats, int N, int Vl, int v0, int V) {
  __shared__ double sh[32];
  const int n = blockIdx.x, R = real_columns(Vl, v0, V);
  const In x = logits + size_t(n) * Vl;
  const float m = row_max[n];
  double z = 0.0;
  for (int j = threadIdx.x; j < R; j += blockDim.x) z += expf(x[j] - m);
  z = block_sum(z, sh);
  if (threadIdx.x == 0) {
    stats[n] = static_cast<float>(z);
    const int t = targets[n] - v0;
    stats[N + n] = t >= 0 && t < R ? x[t] : 0.0f;
  }
}

// loss = log Z + m - x_t (double); with dloss != 0: x_j = e^(x_j - m) (dloss / Z) - [j == t] dloss
// for j < R, 0 for the padding columns. Target kUnscored: loss 0, x_j = 0 (scale 0, t held by no
// rank), as the CPU backend's.
__global__ void ce_loss_kernel(Out logits, const float* row_max, const float* stats,
                               const int32_t* targets, float* losses, double* row_loss, int N,
                               int Vl, int v0, int V, float dloss) {
  const int n = blockIdx.x, R = real_columns(Vl, v0, V);
  const float m = row_max[n];
  const double z = static_cast<double>(stats[n]);
  const bool scored = targets[n] != kUnscored;
  if (threadIdx.x == 0) {
    const double loss =
        scored ? log(z) + static_cast<double>(m) - static_cast<double>(stats[N + n]) : 0.0;
    losses[n] = static_cast<float>(loss);
    row_loss[n] = loss;
  }
  if (dloss == 0.0f) return;
  const Out x = logits + size_t(n) * Vl;
  const float s = scored ? static_cast<float>(1.0 / z) * dloss : 0.0f;
  const int t = targets[n] - v0;
  // the target's -dloss in the same expression: a 2-byte logit is rounded once, as in fp32
  for (int j = threadIdx.x; j < Vl; j += blockDim.x) {
    if (j >= R) {
      x[j] = 0.0f;
      continue;
    }
    const float g = expf(x[j] - m) * s;
    x[j] = j == t ? g - dloss : g;
  }
}

}  // namespace

void launch_ce_row_max(In logits, float* row_max, int N, int Vl, int v0, int V, cudaStream_t s) {
  if (N == 0) return;
  ce_row_max_kernel<<<N, 512, 0, s>>>(logits, row_max, Vl, v0, V);
  CUDA_CHECK_LAUNCH();
}

void launch_ce_stats(In logits, const float* row_max, const int32_t* targets, float* stats, int N,
                     int Vl, int v0, int V, cudaStream_t s) {
  if (N == 0) return;
  ce_stats_kernel<<<N, 512, 0, s>>>(logits, row_max, targets, stats, N, Vl, v0, V);
  CUDA_CHECK_LAUNCH();
}

void launch_ce_loss(Out logits, const float* row_max, const float* stats, const int32_t* targets,
                    float* losses, double* row_loss, int N, int Vl, int v0, int V, float dloss,
                    cudaStream_t s) {
  if (N == 0) return;
  ce_loss_kernel<<<N, 512, 0, s>>>(logits, row_max, stats, targets, losses, row_loss, N, Vl, v0, V,
                                   dloss);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mpitrain::cuda
