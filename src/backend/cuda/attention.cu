// CUDA kernels: causal self-attention with grouped-query heads by sequence position,
// flash-attention style in fp32 on q, k, v of any storage type: the T x T scores are never
// stored, only each row's log-sum-exp. One kernel set serves both Backend APIs: the whole
// sequence (positions 0..T-1, its own keys) and context parallelism's block pairs (queries
// against one block of keys, by position, the CPU backend's semantics: cpu_attention.cpp).
//
// Query i of sequence b sees key j iff kpos[j] <= qpos[i] and kpos[j] >= first_seen(qpos[i],
// window, doc[b Tq + i]): with a sliding window W > 0, kpos[j] > qpos[i] - W, and with document
// starts not before the query's document (backend.hpp's attention_sees; positions and document
// starts: device arrays, or null: 0, 1, ... and no documents). A tile whose queries all precede
// its keys, or whose keys all lie before every query's first seen position, is skipped (the same
// decision in every thread of a block).
// Forward, one block per (32 queries, b, query head h): tiles of 32 keys of kv head h/group pass
// through shared memory; each warp owns 8 query rows, a lane owns one key of the tile for the
// scores and dims lane, lane+32, ... of the output; online softmax (running max m and sum l)
// from m = -inf, l = 0, o = 0, or with merge from the earlier blocks' m = lse, l = 1, o = out (a
// row with lse -inf starts empty); out = o / l, lse = m + log l at the end (0 and -inf for a row
// that saw no key).
// Backward, one block per (32 keys, b, kv head g): for each query head of the group and each
// query tile that sees a key of the block, recompute p = e^(s - lse), dp = dout . v,
// ds = p (dp - D) scale; dK, dV of the block's keys are summed in registers and added once (the
// block is their only writer in a launch); dQ gets atomic adds (many key blocks touch a query
// row). D = rowsum(dout * out) comes from the forward's output (one warp per row, before), lse
// from the forward: nothing of the forward is recomputed.
#include <climits>

#include "common.cuh"
#include "kernels.hpp"

namespace mpitrain::cuda {

namespace {

constexpr int kTile = 32;  // queries per block, keys per tile
constexpr int kWarps = 4;  // threads = 128
constexpr int kRowsPerWarp = kTile / kWarps;
constexpr int kMaxHeadSize = 256;

// Shared memory of a forward block: Q [kTile][hs], K [kTile][hs + 1] (padded: lanes read
// different rows), V [kTile][hs].
size_t forward_smem(int hs) { return sizeof(float) * kTile * (3 * hs + 1); }
// Of a backward block: K, V [kTile][hs + 1], Q, dO [kTile][hs], P, dS [kTile][kTile + 1], the
// query rows' lse and D [kTile].
size_t backward_smem(int hs) {
  return sizeof(float) *
         (2 * kTile * (hs + 1) + 2 * kTile * hs + 2 * kTile * (kTile + 1) + 2 * kTile);
}

// q heads at qkv[(b Tq + i) q_ld + h hs], q_ld = (NH + 2 NKV) hs; k head g at
// kv[(b Tk + j) kv_ld + g hs], v head g at kv[(b Tk + j) kv_ld + (NKV + g) hs].
struct BlockShape {
  int B, Tq, Tk, NH, NKV, hs, kv_ld;
  float scale;
  int window;       // 0: none
  const int* docs;  // (B, Tq) the query rows' document starts, or null
  __host__ __device__ size_t q_ld() const { return size_t(NH + 2 * NKV) * hs; }
  __host__ __device__ size_t k_at(int b, int j, int g) const {
    return (size_t(b) * Tk + j) * kv_ld + size_t(g) * hs;
  }
  __host__ __device__ size_t v_at(int b, int j, int g) const { return k_at(b, j, NKV + g); }
};

__device__ __forceinline__ int position(const int* pos, int i) { return pos ? pos[i] : i; }

// first_seen (backend.hpp) on the device: the first position query row i of sequence b, at
// position qpos, sees.
__device__ __forceinline__ int first_seen(const BlockShape& sh, int b, int i, int qpos) {
  const int start = sh.docs ? sh.docs[size_t(b) * sh.Tq + i] : 0;
  return sh.window > 0 && qpos - sh.window + 1 > start ? qpos - sh.window + 1 : start;
}

__device__ __forceinline__ int warp_min_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ int warp_max_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
// The lowest / highest position of rows [i0, i0 + kTile) ∩ [0, n), the same in every warp.
__device__ __forceinline__ int tile_min(const int* pos, int i0, int n) {
  const int i = i0 + threadIdx.x % 32;
  return warp_min_int(i < n ? position(pos, i) : INT_MAX);
}
__device__ __forceinline__ int tile_max(const int* pos, int i0, int n) {
  const int i = i0 + threadIdx.x % 32;
  return warp_max_int(i < n ? position(pos, i) : INT_MIN);
}
// The lowest first_seen of query rows [i0, i0 + kTile) ∩ [0, Tq) of sequence b, likewise.
__device__ __forceinline__ int tile_first(const int* qpos, const BlockShape& sh, int b, int i0) {
  const int i = i0 + threadIdx.x % 32;
  return warp_min_int(i < sh.Tq ? first_seen(sh, b, i, position(qpos, i)) : INT_MAX);
}

// K [kTile][hs + 1] and V [kTile][v_ld] of keys [j0, j0 + kTile) of (b, g); zeros past Tk.
__device__ __forceinline__ void load_keys(float* Ks, float* Vs, int v_ld, In kv,
                                          const BlockShape& sh, int b, int g, int j0) {
  const int hs = sh.hs;
  for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
    const int j = e / hs, d = e % hs;
    const bool in = j0 + j < sh.Tk;
    Ks[j * (hs + 1) + d] = in ? kv[sh.k_at(b, j0 + j, g) + d] : 0.0f;
    Vs[j * v_ld + d] = in ? kv[sh.v_at(b, j0 + j, g) + d] : 0.0f;
  }
}

// DPL: output dims per lane (hs <= 32 * DPL). out (B, Tq, NH hs) in its storage type (the
// block API's is fp32), lse (B, NH, Tq).
template <int DPL>
__global__ void __launch_bounds__(kWarps * 32)
    forward_kernel(Out out, float* lse, In qkv, In kv, const int* qpos, const int* kpos,
                   BlockShape sh, bool merge) {
  extern __shared__ float smem[];
  const int hs = sh.hs;
  float* Qs = smem;                   // [kTile][hs]
  float* Ks = Qs + kTile * hs;        // [kTile][hs + 1]
  float* Vs = Ks + kTile * (hs + 1);  // [kTile][hs]
  const int i0 = blockIdx.x * kTile, b = blockIdx.y / sh.NH, h = blockIdx.y % sh.NH;
  const int g = h / (sh.NH / sh.NKV);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t q_ld = sh.q_ld(), A = size_t(sh.NH) * hs;

  for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
    const int r = e / hs, d = e % hs, t = i0 + r;
    Qs[e] = t < sh.Tq ? qkv[(size_t(b) * sh.Tq + t) * q_ld + size_t(h) * hs + d] : 0.0f;
  }
  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][DPL];
  int qp[kRowsPerWarp], first[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) {  // the running state: empty, or the earlier blocks'
    const int t = i0 + warp + kWarps * i;
    const bool row = t < sh.Tq;
    qp[i] = row ? position(qpos, t) : INT_MIN;
    first[i] = row ? first_seen(sh, b, t, qp[i]) : INT_MAX;
    m[i] = merge && row ? lse[(size_t(b) * sh.NH + h) * sh.Tq + t] : -INFINITY;
    l[i] = m[i] == -INFINITY ? 0.0f : 1.0f;
    const size_t orow = (size_t(b) * sh.Tq + t) * A + size_t(h) * hs;
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane + 32 * k;
      o[i][k] = l[i] > 0.0f && d < hs ? float(out[orow + d]) : 0.0f;
    }
  }
  const int qhi = tile_max(qpos, i0, sh.Tq), qfirst = tile_first(qpos, sh, b, i0);

  for (int j0 = 0; j0 < sh.Tk; j0 += kTile) {
    if (qhi < tile_min(kpos, j0, sh.Tk)) continue;     // every query precedes every key
    if (tile_max(kpos, j0, sh.Tk) < qfirst) continue;  // every key before every query's first
    __syncthreads();                                 // the previous tile is no longer read
    load_keys(Ks, Vs, hs, kv, sh, b, g, j0);
    __syncthreads();
    const int tk = j0 + lane;
    const int kp = tk < sh.Tk ? position(kpos, tk) : INT_MAX;
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) {
      const int r = warp + kWarps * i;
      if (i0 + r >= sh.Tq) continue;  // uniform over the warp
      float s = 0.0f;
#pragma unroll 4
      for (int d = 0; d < hs; ++d) s += Qs[r * hs + d] * Ks[lane * (hs + 1) + d];
      const bool valid = kp <= qp[i] && kp >= first[i];
      s = valid ? s * sh.scale : -INFINITY;
      const float m_new = fmaxf(m[i], warp_max(s));
      if (m_new == -INFINITY) continue;  // the row has seen no key yet (uniform over the warp)
      const float p = valid ? expf(s - m_new) : 0.0f;
      const float corr = m[i] == -INFINITY ? 0.0f : expf(m[i] - m_new);  // o, l are 0 if -inf
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
    const int t = i0 + warp + kWarps * i;
    if (t >= sh.Tq) continue;
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    const size_t orow = (size_t(b) * sh.Tq + t) * A + size_t(h) * hs;
#pragma unroll
    for (int k = 0; k < DPL; ++k) {
      const int d = lane + 32 * k;
      if (d < hs) out[orow + d] = o[i][k] * inv;
    }
    if (lane == 0)
      lse[(size_t(b) * sh.NH + h) * sh.Tq + t] = l[i] > 0.0f ? m[i] + logf(l[i]) : -INFINITY;
  }
}

// dq (B, Tq, rows of dq_ld: head h at h hs) and dkv (B, Tk, rows of dkv_ld: dk head g at g hs,
// dv head g at (NKV + g) hs): fp32 accumulators, added to; lse, D (B, NH, Tq).
template <int DPL>
__global__ void __launch_bounds__(kWarps * 32)
    backward_kernel(float* dq, size_t dq_ld, float* dkv, size_t dkv_ld, In dout, In qkv, In kv,
                    const float* lse, const float* D, const int* qpos, const int* kpos,
                    BlockShape sh) {
  extern __shared__ float smem[];
  constexpr int EPT = kTile * 32 * DPL / (kWarps * 32);  // dK/dV elements per thread (hs=32 DPL)
  const int hs = sh.hs;
  float* Ks = smem;                          // [kTile][hs + 1]
  float* Vs = Ks + kTile * (hs + 1);         // [kTile][hs + 1]
  float* Qs = Vs + kTile * (hs + 1);         // [kTile][hs]
  float* dOs = Qs + kTile * hs;              // [kTile][hs]
  float* Ps = dOs + kTile * hs;              // [kTile queries][kTile + 1 keys]
  float* dSs = Ps + kTile * (kTile + 1);     // [kTile][kTile + 1]
  float* lse_s = dSs + kTile * (kTile + 1);  // [kTile]
  float* D_s = lse_s + kTile;                // [kTile]
  const int j0 = blockIdx.x * kTile, b = blockIdx.y / sh.NKV, g = blockIdx.y % sh.NKV;
  const int group = sh.NH / sh.NKV;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const size_t q_ld = sh.q_ld(), A = size_t(sh.NH) * hs;

  load_keys(Ks, Vs, hs + 1, kv, sh, b, g, j0);
  const int klo = tile_min(kpos, j0, sh.Tk), khi = tile_max(kpos, j0, sh.Tk);
  const int kp = j0 + lane < sh.Tk ? position(kpos, j0 + lane) : INT_MAX;  // lane's key
  float dk[EPT], dv[EPT];
#pragma unroll
  for (int x = 0; x < EPT; ++x) dk[x] = dv[x] = 0.0f;

  for (int hi = 0; hi < group; ++hi) {
    const int h = g * group + hi;
    for (int i0 = 0; i0 < sh.Tq; i0 += kTile) {
      if (tile_max(qpos, i0, sh.Tq) < klo) continue;       // every query precedes every key
      if (khi < tile_first(qpos, sh, b, i0)) continue;  // every key before every query's first
      __syncthreads();                                // the previous tile is no longer read
      for (int e = threadIdx.x; e < kTile * hs; e += blockDim.x) {
        const int r = e / hs, d = e % hs, t = i0 + r;
        const bool row = t < sh.Tq;
        Qs[e] = row ? qkv[(size_t(b) * sh.Tq + t) * q_ld + size_t(h) * hs + d] : 0.0f;
        dOs[e] = row ? dout[(size_t(b) * sh.Tq + t) * A + size_t(h) * hs + d] : 0.0f;
      }
      if (threadIdx.x < kTile) {
        const int t = i0 + threadIdx.x;
        const size_t srow = (size_t(b) * sh.NH + h) * sh.Tq + t;
        lse_s[threadIdx.x] = t < sh.Tq ? lse[srow] : -INFINITY;
        D_s[threadIdx.x] = t < sh.Tq ? D[srow] : 0.0f;
      }
      __syncthreads();
      // scores of (the warp's rows) x (key lane); dQ rows += dS K
#pragma unroll 1
      for (int i = 0; i < kRowsPerWarp; ++i) {
        const int r = warp + kWarps * i, t = i0 + r;
        const int qp = t < sh.Tq ? position(qpos, t) : INT_MIN;
        const bool valid = t < sh.Tq && kp <= qp && kp >= first_seen(sh, b, t, qp) &&
                           lse_s[r] != -INFINITY;
        float s = 0.0f, dp = 0.0f;
#pragma unroll 4
        for (int d = 0; d < hs; ++d) {
          s += Qs[r * hs + d] * Ks[lane * (hs + 1) + d];
          dp += dOs[r * hs + d] * Vs[lane * (hs + 1) + d];
        }
        const float p = valid ? expf(s * sh.scale - lse_s[r]) : 0.0f;
        const float ds = p * (dp - D_s[r]) * sh.scale;
        Ps[r * (kTile + 1) + lane] = p;
        dSs[r * (kTile + 1) + lane] = ds;
        if (t >= sh.Tq) continue;  // uniform over the warp
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
        float* dqr = dq + (size_t(b) * sh.Tq + t) * dq_ld + size_t(h) * hs;
#pragma unroll
        for (int k = 0; k < DPL; ++k) {
          const int d = lane + 32 * k;
          if (d < hs) atomicAdd(dqr + d, acc[k]);
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
    const int j = e / hs, d = e % hs, tk = j0 + j;
    if (tk >= sh.Tk) continue;
    float* row = dkv + (size_t(b) * sh.Tk + tk) * dkv_ld;
    row[size_t(g) * hs + d] += dk[x];
    row[size_t(sh.NKV + g) * hs + d] += dv[x];
  }
}

// The row-dot kernel's shape: B sequences of T rows, NH heads of hs.
struct RowShape {
  int B, T, NH, hs;
};

// D(B,NH,T) = rowsum(dout * out) over each head's hs dims, one warp per row; lane sums dims lane,
// lane + 32, ... in order, then the warp: the order of a warp's output dims in the forward.
__global__ void attention_d_kernel(float* D, In dout, In out, RowShape sh) {
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

// The kernel instance for head size hs: dims per lane 2, 4 or 8.
template <class F>
void dispatch(int hs, F&& f) {
  if (hs <= 64)
    f.template operator()<2>();
  else if (hs <= 128)
    f.template operator()<4>();
  else
    f.template operator()<8>();
}

BlockShape block_shape(int B, int Tq, int Tk, int NH, int NKV, int hs, int kv_ld, float scale,
                       int window, const int* docs) {
  if (hs > kMaxHeadSize || hs <= 0 || NKV <= 0 || NH % NKV != 0)
    MPITRAIN_THROW("attention kernel: head size must be in 1.." + std::to_string(kMaxHeadSize) +
                   " and the query heads a multiple of the kv heads");
  if (kv_ld < 2 * NKV * hs)
    MPITRAIN_THROW("attention block kernel: kv row stride " + std::to_string(kv_ld) +
                   " is shorter than the 2 * NKV * hs = " + std::to_string(2 * NKV * hs) +
                   " values each row holds");
  return {B, Tq, Tk, NH, NKV, hs, kv_ld, scale, window, docs};
}

void forward(Out out, float* lse, In qkv, In kv, const int* qpos, const int* kpos,
             const BlockShape& sh, bool merge, cudaStream_t s) {
  if (sh.B == 0 || sh.Tq == 0) return;
  const dim3 grid((sh.Tq + kTile - 1) / kTile, sh.B * sh.NH);
  const size_t smem = forward_smem(sh.hs);
  dispatch(sh.hs, [&]<int DPL>() {
    CUDA_CHECK(cudaFuncSetAttribute(forward_kernel<DPL>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    forward_kernel<DPL><<<grid, kWarps * 32, smem, s>>>(out, lse, qkv, kv, qpos, kpos, sh, merge);
    CUDA_CHECK_LAUNCH();
  });
}

void backward(float* dq, size_t dq_ld, float* dkv, size_t dkv_ld, In dout, In qkv, In kv,
              const float* lse, const float* D, const int* qpos, const int* kpos,
              const BlockShape& sh, cudaStream_t s) {
  if (sh.B == 0 || sh.Tq == 0 || sh.Tk == 0) return;
  const dim3 grid((sh.Tk + kTile - 1) / kTile, sh.B * sh.NKV);
  const size_t smem = backward_smem(sh.hs);
  dispatch(sh.hs, [&]<int DPL>() {
    CUDA_CHECK(cudaFuncSetAttribute(backward_kernel<DPL>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)));
    backward_kernel<DPL><<<grid, kWarps * 32, smem, s>>>(dq, dq_ld, dkv, dkv_ld, dout, qkv, kv,
                                                         lse, D, qpos, kpos, sh);
    CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

void launch_attention_forward(Out out, float* lse, In qkv, int B, int T, int NH, int NKV, int hs,
                              float scale, int window, const int* docs, cudaStream_t s) {
  const int QKV = (NH + 2 * NKV) * hs;
  forward(out, lse, qkv, qkv + size_t(NH) * hs, nullptr, nullptr,
          block_shape(B, T, T, NH, NKV, hs, QKV, scale, window, docs), false, s);
}

void launch_attention_d(float* D, In dout, In out, int B, int T, int NH, int hs, cudaStream_t s) {
  const RowShape sh{B, T, NH, hs};
  const size_t rows = size_t(B) * NH * T;
  if (rows == 0) return;
  const int threads = kWarps * 32;
  const size_t blocks = (rows * 32 + threads - 1) / threads;
  attention_d_kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(D, dout, out, sh);
  CUDA_CHECK_LAUNCH();
}

void launch_attention_backward(float* dqkv, In dout, In qkv, const float* lse, const float* D,
                               int B, int T, int NH, int NKV, int hs, float scale, int window,
                               const int* docs, cudaStream_t s) {
  const int QKV = (NH + 2 * NKV) * hs;
  const BlockShape sh = block_shape(B, T, T, NH, NKV, hs, QKV, scale, window, docs);
  CUDA_CHECK(cudaMemsetAsync(dqkv, 0, sizeof(float) * size_t(B) * T * QKV, s));
  backward(dqkv, QKV, dqkv + size_t(NH) * hs, QKV, dout, qkv, qkv + size_t(NH) * hs, lse, D,
           nullptr, nullptr, sh, s);
}

void launch_attention_block_forward(float* out, float* lse, In qkv, In kv, int kv_ld,
                                    const int* qpos, const int* kpos, int B, int Tq, int Tk,
                                    int NH, int NKV, int hs, float scale, int window,
                                    const int* docs, bool merge, cudaStream_t s) {
  forward(out, lse, qkv, kv, qpos, kpos,
          block_shape(B, Tq, Tk, NH, NKV, hs, kv_ld, scale, window, docs), merge, s);
}

void launch_attention_block_backward(float* dq, float* dkv, In dout, In qkv, In kv, int kv_ld,
                                     const float* lse, const float* D, const int* qpos,
                                     const int* kpos, int B, int Tq, int Tk, int NH, int NKV,
                                     int hs, float scale, int window, const int* docs,
                                     cudaStream_t s) {
  backward(dq, size_t(NH) * hs, dkv, size_t(2) * NKV * hs, dout, qkv, kv, lse, D, qpos, kpos,
           block_shape(B, Tq, Tk, NH, NKV, hs, kv_ld, scale, window, docs), s);
}

}  // namespace mpitrain::cuda
