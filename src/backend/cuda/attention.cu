// CUDA kernels: causal self-attention with grouped-query heads, flash-attention style in fp32:
// the T x T scores are never stored, only each row's log-sum-exp.
//
// Forward, one block per (32 queries, b, query head h): tiles of 32 keys of kv head h/group pass
// through shared memory; each warp owns 8 query rows, a lane owns one key of the tile for the
// scores and dims lane, lane+32, ... of the output; online softmax (running max m and sum l).
// Backward, one block per (32 keys, b, kv head g): for each query head of the group and each
// query tile at or after the keys, recompute p = e^(s - lse), dp = dout . v,
// ds = p (dp - D) scale; dK, dV of the block's keys are summed in registers and stored once
// (the block is their only writer); dQ gets atomic adds (many key blocks touch a query row), so
// the caller zeroes dqkv first. D = rowsum(dout * out) comes from the forward's output (one warp
// per row, before), lse from the forward: nothing of the forward is recomputed.
#include "attention_tiles.cuh"
#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

using attention::backward_smem;
using attention::dispatch;
using attention::forward_smem;
using attention::kRowsPerWarp;
using attention::kTile;
using attention::kWarps;

struct Shape {
  int B, T, NH, NKV, hs;
  float scale;  // on q.k: 1/sqrt(hs) unless the model says otherwise
  __host__ __device__ size_t qkv_row() const { return size_t(NH + 2 * NKV) * hs; }
};

// DPL: output dims per lane (hs <= 32 * DPL).
template <int DPL>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(Out out, float* lse, In qkv, Shape sh) {
  extern __shared__ float smem[];
  const int hs = sh.hs, T = sh.T;
  float* Qs = smem;                   // [kTile][hs]
  float* Ks = Qs + kTile * hs;        // [kTile][hs + 1] (padded: lanes read different rows)
  float* Vs = Ks + kTile * (hs + 1);  // [kTile][hs]
  const int qb = blockIdx.x, b = blockIdx.y / sh.NH, h = blockIdx.y % sh.NH;
  const int g = h / (sh.NH / sh.NKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t row = sh.qkv_row(), A = size_t(sh.NH) * hs;
  const In base = qkv + size_t(b) * T * row;
  const float scale = sh.scale;

  for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
    const int r = e / hs, d = e % hs, t = qb * kTile + r;
    Qs[e] = t < T ? base[size_t(t) * row + size_t(h) * hs + d] : 0.0f;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][DPL];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    m[i] = -INFINITY;
    l[i] = 0.0f;
#pragma unroll
    for (int k = 0; k < DPL; ++k) o[i][k] = 0.0f;
  }

  for (int kt = 0; kt <= qb; ++kt) {
    __syncthreads();  // the previous tile is no longer read
    for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
      const int j = e / hs, d = e % hs, tk = kt * kTile + j;
      const bool in = tk < T;
      Ks[j * (hs + 1) + d] = in ? base[size_t(tk) * row + size_t(sh.NH + g) * hs + d] : 0.0f;
      Vs[j * hs + d] = in ? base[size_t(tk) * row + size_t(sh.NH + sh.NKV + g) * hs + d] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + kWarps * i, t = qb * kTile + r;
      if (t >= T) continue;  // uniform over the warp
      const int tk = kt * kTile + lane;
      float s = 0.0f;
#pragma unroll 4
      for (int d = 0; d < hs; ++d) s += Qs[r * hs + d] * Ks[lane * (hs + 1) + d];
      const bool valid = tk <= t;  // key 0 of every tile up to qb is valid: the max is finite
      s = valid ? s * scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));
      const float p = valid ? expf(s - m_new) : 0.0f;
      const float corr = expf(m[i] - m_new);  // 0 on the first tile (m = -inf)
      l[i] = l[i] * corr + warp_sum(p);
      m[i] = m_new;
#pragma unroll
      for (int k = 0; k < DPL; ++k) o[i][k] *= corr;
#pragma unroll 4
      for (int jj = 0; jj < kTile; ++jj) {
        const float pj = __shfl_sync(0xffffffffu, p, jj);
#pragma unroll
        for (int k = 0; k < DPL; ++k) {
          const int d = lane + 32 * k;
          if (d < hs) o[i][k] += pj * Vs[jj * hs + d];
        }
      }
    }
  }

#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {
    const int r = warp + kWarps * i, t = qb * kTile + r;
    if (t >= T) continue;
    const float inv = 1.0f / l[i];
    const size_t orow = (size_t(b) * T + t) * A + size_t(h) * hs;
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) out[orow + d] = o[i][k] * inv;
    }
    if (lane == 0) lse[(size_t(b) * sh.NH + h) * T + t] = m[i] + logf(l[i]);
  }
}

// D(B,NH,T) = rowsum(dout * out) over each head's hs dims, one warp per row; lane sums dims lane,
// lane + 32, ... in order, then the warp: the order of a warp's output dims in the forward.
__global__ void attention_d_kernel(float* D, In dout, In out, Shape sh) {
  const size_t rows = size_t(sh.B) * sh.NH * sh.T;
  const size_t r = (size_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;  // uniform over the warp
  const size_t b = r / (size_t(sh.NH) * sh.T), h = r / sh.T % sh.NH, t = r % sh.T;
  const size_t orow = (b * sh.T + t) * sh.NH * sh.hs + h * sh.hs;
  float dsum = 0.0f;
  for (int d = lane; d < sh.hs; d += 32) dsum += out[orow + d] * dout[orow + d];
  dsum = warp_sum(dsum);
  if (lane == 0) D[r] = dsum;
}

template <int DPL>
__global__ void __launch_bounds__(kWarps * 32)
    attention_backward_kernel(float* dqkv, In dout, In qkv, const float* lse, const float* D,
                              Shape sh) {
  extern __shared__ float smem[];
  constexpr int EPT = kTile * 32 * DPL / (kWarps * 32);  // dK/dV elements per thread (hs=32 DPL)
  const int hs = sh.hs, T = sh.T;
  float* Ks = smem;                          // [kTile][hs + 1]
  float* Vs = Ks + kTile * (hs + 1);         // [kTile][hs + 1]
  float* Qs = Vs + kTile * (hs + 1);         // [kTile][hs]
  float* dOs = Qs + kTile * hs;              // [kTile][hs]
  float* Ps = dOs + kTile * hs;              // [kTile queries][kTile + 1 keys]
  float* dSs = Ps + kTile * (kTile + 1);     // [kTile][kTile + 1]
  float* lse_s = dSs + kTile * (kTile + 1);  // [kTile]
  float* D_s = lse_s + kTile;                // [kTile]
  const int kb = blockIdx.x, b = blockIdx.y / sh.NKV, g = blockIdx.y % sh.NKV;
  const int group = sh.NH / sh.NKV, nq = (T + kTile - 1) / kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t row = sh.qkv_row(), A = size_t(sh.NH) * hs;
  const In base = qkv + size_t(b) * T * row;
  float* dbase = dqkv + size_t(b) * T * row;
  const float scale = sh.scale;

  for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
    const int j = e / hs, d = e % hs, tk = kb * kTile + j;
    const bool in = tk < T;
    Ks[j * (hs + 1) + d] = in ? base[size_t(tk) * row + size_t(sh.NH + g) * hs + d] : 0.0f;
    Vs[j * (hs + 1) + d] = in ? base[size_t(tk) * row + size_t(sh.NH + sh.NKV + g) * hs + d] : 0.0f;
  }
  float dk[EPT], dv[EPT];
#pragma unroll
  for (int x = 0; x < EPT; ++x) dk[x] = dv[x] = 0.0f;

  for (int hi = 0; hi < group; ++hi) {
    const int h = g * group + hi;
    for (int qt = kb; qt < nq; ++qt) {
      __syncthreads();  // the previous tile is no longer read
      for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
        const int r = e / hs, d = e % hs, t = qt * kTile + r;
        Qs[e] = t < T ? base[size_t(t) * row + size_t(h) * hs + d] : 0.0f;
        dOs[e] = t < T ? dout[(size_t(b) * T + t) * A + size_t(h) * hs + d] : 0.0f;
      }
      if (threadIdx.x < kTile) {
        const int t = qt * kTile + threadIdx.x;
        const size_t srow = (size_t(b) * sh.NH + h) * T + t;
        lse_s[threadIdx.x] = t < T ? lse[srow] : 0.0f;
        D_s[threadIdx.x] = t < T ? D[srow] : 0.0f;
      }
      __syncthreads();
      // scores of (the warp's rows) x (key lane); dQ rows += ds K
#pragma unroll 1
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp + kWarps * i, t = qt * kTile + r, tk = kb * kTile + lane;
        const bool valid = t < T && tk <= t;  // tk <= t < T
        float s = 0.0f, dp = 0.0f;
#pragma unroll 4
        for (int d = 0; d < hs; ++d) {
          s += Qs[r * hs + d] * Ks[lane * (hs + 1) + d];
          dp += dOs[r * hs + d] * Vs[lane * (hs + 1) + d];
        }
        const float p = valid ? expf(s * scale - lse_s[r]) : 0.0f;
        const float ds = p * (dp - D_s[r]) * scale;
        Ps[r * (kTile + 1) + lane] = p;
        dSs[r * (kTile + 1) + lane] = ds;
        if (t >= T) continue;  // uniform over the warp
        float acc[DPL];
#pragma unroll
        for (int k = 0; k < DPL; ++k) acc[k] = 0.0f;
#pragma unroll 4
        for (int jj = 0; jj < kTile; ++jj) {
          const float dsj = __shfl_sync(0xffffffffu, ds, jj);
#pragma unroll
          for (int k = 0; k < DPL; ++k) {
            const int d = lane + 32 * k;
            if (d < hs) acc[k] += dsj * Ks[jj * (hs + 1) + d];
          }
        }
        float* dq = dbase + size_t(t) * row + size_t(h) * hs;
#pragma unroll
        for (int k = 0; k < DPL; ++k) {
          const int d = lane + 32 * k;
          if (d < hs) atomicAdd(dq + d, acc[k]);
        }
      }
      __syncthreads();
      // dV[j] += sum_i P[i][j] dO[i];  dK[j] += sum_i dS[i][j] Q[i]
#pragma unroll
      for (int x = 0; x < EPT; ++x) {
        const int e = threadIdx.x + kWarps * 32 * x;
        if (e >= kTile * hs) break;
        const int j = e / hs, d = e % hs;
        float av = 0.0f, ak = 0.0f;
#pragma unroll 4
        for (int r = 0; r < kTile; ++r) {
          av += Ps[r * (kTile + 1) + j] * dOs[r * hs + d];
          ak += dSs[r * (kTile + 1) + j] * Qs[r * hs + d];
        }
        dv[x] += av;
        dk[x] += ak;
      }
    }
  }
#pragma unroll
  for (int x = 0; x < EPT; ++x) {
    const int e = threadIdx.x + kWarps * 32 * x;
    if (e >= kTile * hs) break;
    const int j = e / hs, d = e % hs, tk = kb * kTile + j;
    if (tk >= T) continue;
    dbase[size_t(tk) * row + size_t(sh.NH + g) * hs + d] = dk[x];
    dbase[size_t(tk) * row + size_t(sh.NH + sh.NKV + g) * hs + d] = dv[x];
  }
}

void check_shape(const Shape& sh) { attention::check_heads(sh.hs, sh.NH, sh.NKV); }

}  // namespace

void launch_attention_forward(Out out, float* lse, In qkv, int B, int T, int NH, int NKV, int hs,
                              float scale, cudaStream_t s) {
  const Shape sh{B, T, NH, NKV, hs, scale};
  check_shape(sh);
  if (B == 0 || T == 0) return;
  const dim3 grid((T + kTile - 1) / kTile, B * NH);
  const size_t smem = forward_smem(hs);
  dispatch(hs, [&]<int DPL>() {
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<DPL>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    attention_forward_kernel<DPL><<<grid, kWarps * 32, smem, s>>>(out, lse, qkv, sh);
    CUDA_CHECK_LAUNCH();
  });
}

void launch_attention_d(float* D, In dout, In out, int B, int T, int NH, int hs, cudaStream_t s) {
  const Shape sh{B, T, NH, NH, hs, 1.0f};
  const size_t rows = size_t(B) * NH * T;
  if (rows == 0) return;
  const int threads = kWarps * 32;
  const size_t blocks = (rows * 32 + threads - 1) / threads;
  attention_d_kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(D, dout, out, sh);
  CUDA_CHECK_LAUNCH();
}

void launch_attention_backward(float* dqkv, In dout, In qkv, const float* lse, const float* D,
                               int B, int T, int NH, int NKV, int hs, float scale,
                               cudaStream_t s) {
  const Shape sh{B, T, NH, NKV, hs, scale};
  check_shape(sh);
  if (B == 0 || T == 0) return;
  CUDA_CHECK(cudaMemsetAsync(dqkv, 0, sizeof(float) * size_t(B) * T * sh.qkv_row(), s));
  const dim3 grid((T + kTile - 1) / kTile, B * NKV);
  const size_t smem = backward_smem(hs);
  dispatch(hs, [&]<int DPL>() {
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel<DPL>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    attention_backward_kernel<DPL><<<grid, kWarps * 32, smem, s>>>(dqkv, dout, qkv, lse, D, sh);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace mpitrain::cuda
