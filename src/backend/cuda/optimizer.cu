// CUDA kernels: AdamW, SGD with momentum, LAMB's two passes, and the sum of squares (in double,
// fixed order) for the gradient norm, each over a table of segments in one launch (kernels.hpp).
// The maths is the CPU backend's (cpu_optimizer.cpp).
#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

// The segment this block covers: the last s with first[s] <= blockIdx.x (every segment has at
// least one block), and the block's elements [begin, end) of the flat buffer.
struct BlockRange {
  int segment;
  size_t begin, end;
};
__device__ BlockRange block_range(const SegmentTable& t) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first[mid] <= blockIdx.x)
      lo = mid;
    else
      hi = mid - 1;
  }
  const size_t n = t.n[lo], blocks = t.first[lo + 1] - t.first[lo];
  const size_t per = (n + blocks - 1) / blocks, j = blockIdx.x - t.first[lo];
  const size_t b = j * per < n ? j * per : n, e = b + per < n ? b + per : n;
  return {lo, t.at[lo] + b, t.at[lo] + e};
}

// u = m bc1 / (sqrt(v bc2) + eps) + wd p: the AdamW / LAMB update direction
__device__ __forceinline__ float adam_direction(float m, float v, float p, float bc1, float bc2,
                                                float eps, float wd) {
  return m * bc1 / (sqrtf(v * bc2) + eps) + wd * p;
}

// g = gs grad; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2 (stored); returns u for p
__device__ __forceinline__ float adam_moments(float& m, float& v, float grad, float p, float b1,
                                              float b2, float eps, float wd, float bc1, float bc2,
                                              float gs) {
  const float g = grad * gs;
  const float mi = b1 * m + (1.0f - b1) * g;
  const float vi = b2 * v + (1.0f - b2) * g * g;
  m = mi;
  v = vi;
  return adam_direction(mi, vi, p, bc1, bc2, eps, wd);
}

// AdamW: p -= lr u, wd on the segments marked decay; rounded[i] = p where there is one
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, float lr,
                             float b1, float b2, float eps, float wd, float bc1, float bc2,
                             float gs, Out rounded, const __grid_constant__ SegmentTable t) {
  const BlockRange r = block_range(t);
  const float d = t.decay[r.segment] ? wd : 0.0f;
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float p =
        param[i] - lr * adam_moments(m[i], v[i], grad[i], param[i], b1, b2, eps, d, bc1, bc2, gs);
    param[i] = p;
    if (rounded.data() != nullptr) rounded[i] = p;
  }
}

// g = gs grad; buf = mu buf + g; p -= lr (buf + wd p), wd on the segments marked decay; rounded
// as adamw_kernel's
__global__ void sgd_kernel(float* param, const float* grad, float* buf, float lr, float mu,
                           float wd, float gs, Out rounded,
                           const __grid_constant__ SegmentTable t) {
  const BlockRange r = block_range(t);
  const float d = t.decay[r.segment] ? wd : 0.0f;
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const float b = mu * buf[i] + grad[i] * gs;
    buf[i] = b;
    const float p = param[i] - lr * (b + d * param[i]);
    param[i] = p;
    if (rounded.data() != nullptr) rounded[i] = p;
  }
}

// LAMB first pass. Decayed segments: m, v and partials[block] = sum p^2, partials[blocks +
// block] = sum u^2; the others: the AdamW step at lr without decay, partials 0.
__global__ void lamb_moments_kernel(double* partials, float* param, const float* grad, float* m,
                                    float* v, float lr, float b1, float b2, float eps, float wd,
                                    float bc1, float bc2, float gs,
                                    const __grid_constant__ SegmentTable t) {
  __shared__ double sh[32];
  const BlockRange r = block_range(t);
  const bool decay = t.decay[r.segment];
  double pp = 0.0, uu = 0.0;
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    if (!decay) {
      param[i] -= lr * adam_moments(m[i], v[i], grad[i], param[i], b1, b2, eps, 0.0f, bc1, bc2, gs);
      continue;
    }
    const float u = adam_moments(m[i], v[i], grad[i], param[i], b1, b2, eps, wd, bc1, bc2, gs);
    pp += double(param[i]) * double(param[i]);
    uu += double(u) * double(u);
  }
  pp = block_sum(pp, sh);
  uu = block_sum(uu, sh);
  if (threadIdx.x == 0) {
    partials[blockIdx.x] = pp;
    partials[gridDim.x + blockIdx.x] = uu;
  }
}

// LAMB second pass on the decayed segments: p -= lr[s] u
__global__ void lamb_update_kernel(float* param, const float* m, const float* v, float eps,
                                   float wd, float bc1, float bc2,
                                   const __grid_constant__ SegmentTable t) {
  const BlockRange r = block_range(t);
  if (!t.decay[r.segment]) return;
  const float lr = t.lr[r.segment];
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x)
    param[i] -= lr * adam_direction(m[i], v[i], param[i], bc1, bc2, eps, wd);
}

// partials[block] = sum of x^2 over the block's elements, in double
__global__ void sum_squares_kernel(double* partials, const float* x,
                                   const __grid_constant__ SegmentTable t) {
  __shared__ double sh[32];
  const BlockRange r = block_range(t);
  double s = 0.0;
  for (size_t i = r.begin + threadIdx.x; i < r.end; i += blockDim.x) {
    const double xi = x[i];
    s += xi * xi;
  }
  s = block_sum(s, sh);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// sums[ways s + w] = sum of segment s's partials of way w (partials[w blocks + first[s] ..
// first[s + 1])), in a fixed order: block (s, w) of a (count, ways) grid.
__global__ void segment_sums_kernel(double* sums, const double* partials,
                                    const __grid_constant__ SegmentTable t) {
  __shared__ double sh[32];
  const unsigned s = blockIdx.x, w = blockIdx.y;
  const double* p = partials + size_t{w} * t.first[t.count];
  double v = 0.0;
  for (unsigned i = t.first[s] + threadIdx.x; i < t.first[s + 1]; i += blockDim.x) v += p[i];
  v = block_sum(v, sh);
  if (threadIdx.x == 0) sums[size_t{s} * gridDim.y + w] = v;
}

void launch_segment_sums(double* sums, const double* partials, const SegmentTable& t, int ways,
                         cudaStream_t s) {
  segment_sums_kernel<<<dim3(t.count, ways), kThreads, 0, s>>>(sums, partials, t);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void launch_adamw(float* param, const float* grad, float* m, float* v, const SegmentTable& t,
                  float lr, float b1, float b2, float eps, float wd, float bc1, float bc2,
                  float grad_scale, Out rounded, cudaStream_t s) {
  if (t.count == 0) return;
  adamw_kernel<<<t.blocks(), kThreads, 0, s>>>(param, grad, m, v, lr, b1, b2, eps, wd, bc1, bc2,
                                               grad_scale, rounded, t);
  CUDA_CHECK_LAUNCH();
}

void launch_sgd(float* param, const float* grad, float* buf, const SegmentTable& t, float lr,
                float momentum, float wd, float grad_scale, Out rounded, cudaStream_t s) {
  if (t.count == 0) return;
  sgd_kernel<<<t.blocks(), kThreads, 0, s>>>(param, grad, buf, lr, momentum, wd, grad_scale,
                                             rounded, t);
  CUDA_CHECK_LAUNCH();
}

void launch_lamb_moments(double* sums, double* partials, float* param, const float* grad, float* m,
                         float* v, const SegmentTable& t, float lr, float b1, float b2, float eps,
                         float wd, float bc1, float bc2, float grad_scale, cudaStream_t s) {
  if (t.count == 0) return;
  lamb_moments_kernel<<<t.blocks(), kThreads, 0, s>>>(partials, param, grad, m, v, lr, b1, b2, eps,
                                                      wd, bc1, bc2, grad_scale, t);
  CUDA_CHECK_LAUNCH();
  launch_segment_sums(sums, partials, t, 2, s);
}

void launch_lamb_update(float* param, const float* m, const float* v, const SegmentTable& t,
                        float eps, float wd, float bc1, float bc2, cudaStream_t s) {
  if (t.count == 0) return;
  lamb_update_kernel<<<t.blocks(), kThreads, 0, s>>>(param, m, v, eps, wd, bc1, bc2, t);
  CUDA_CHECK_LAUNCH();
}

void launch_sum_squares(double* sums, double* partials, const float* x, const SegmentTable& t,
                        cudaStream_t s) {
  if (t.count == 0) return;
  sum_squares_kernel<<<t.blocks(), kThreads, 0, s>>>(partials, x, t);
  CUDA_CHECK_LAUNCH();
  launch_segment_sums(sums, partials, t, 1, s);
}

}  // namespace mpitrain::cuda
