// The CUDA backend: every Backend op on device memory of one GPU, in one CUDA stream.
//
// Two kernel sets, chosen at construction (`--kernels`):
//   cudnn  GEMMs through cuBLASLt (algorithm picked once per shape and cached), causal attention
//          through cuDNN's fused flash attention (graph API; bf16/fp16 math only, cuDNN has no
//          fp32 engine), LayerNorm/RMSNorm through cuDNN's norm operations; CUDA kernels for the
//          rest. Where cuDNN reports no engine for a shape, that op uses the CUDA kernel
//          (reported once on stderr).
//   cuda   our own CUDA kernel for every op (tiled GEMM, flash-style attention): no library but
//          the runtime; the second reference of the tests.
// GEMM math: fp32 (exact fp32 products), tf32 (tensor cores, 10-bit mantissa; only when asked),
// bf16 / fp16 (bf16 / fp16 operands, fp32 accumulation — what CpuBackend computes on the same
// 2-byte operands).
//
// Storage: under bf16 / fp16 math, stores() is true for that type: the compute tensors
// (activations, their gradients, the compute copy of the weights and biases) are 2 bytes each,
// and every op reads them as they lie in memory (cuBLASLt A/B/D and cuDNN attention / norm I/O in
// that type; the CUDA kernels load them as float and round what they write, nearest even, fp16
// overflowing to inf). The weights' compute copy is written once per step by convert(). fp32
// stays fp32: parameter gradients (cuBLASLt accumulates dW in fp32, beta = 1), master weights,
// optimizer state, norm statistics, attention's log-sum-exp, cross-entropy statistics, the loss.
// Fp32 Bufs still work under bf16 / fp16 math (the emulated path, MPITRAIN_PRECISION_STORAGE=fp32:
// GEMM and cuDNN operands cast per call into the workspace).
//
// Memory (cuda/arena.hpp): alloc() draws from the arena of the kind set by set_alloc_kind()
// (default activations); the backend's own scratch comes from the workspace arena, sized at
// construction. seal_memory() after set-up fixes the footprint; memory_report() is the plan.
//
// Attention's saved state (backend.hpp): `probs` holds the log-sum-exp of each score row,
// (B,NH,T) floats, ln(sum_j e^(s_j)) with s = q k^T / sqrt(hs) (cuDNN's "Stats"); backward reads
// it and forward's output `out` (nothing of the forward is recomputed) and uses `scratch` for the
// row sums D = rowsum(dout * out) (B,NH,T).
//
// Not deterministic bit for bit: the embedding's and attention's gradients use atomic adds.
// Everything else (every reduction, the losses, sum of squares) has a fixed order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/backend/cuda/arena.hpp"

namespace mpitrain {

enum class KernelSet { Cudnn, Cuda };
KernelSet parse_kernel_set(const std::string& name);  // "cudnn" | "cuda", else UsageError
std::string to_string(KernelSet k);

enum class GemmMath { Fp32, Tf32, Bf16, Fp16 };
GemmMath parse_gemm_math(const std::string& name);  // "fp32" | "tf32" | "bf16" | "fp16"
std::string to_string(GemmMath m);

struct CudaOptions {
  int device = 0;
  KernelSet kernels = KernelSet::Cudnn;
  GemmMath math = GemmMath::Fp32;
  size_t workspace_bytes = size_t{1} << 30;  // cuBLASLt/cuDNN workspaces, emulated-path copies
};

namespace cuda {
struct Context;  // handles, stream, caches, memory (src/backend/cuda/context.hpp)
}

template <typename T>
class CudaBackend final : public Backend<T> {
 public:
  // Throws Error "no CUDA device usable: <reason>" when there is none.
  explicit CudaBackend(const CudaOptions& options);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const CudaOptions& options() const;
  std::string describe() const;  // device, libraries, kernel set, math
  // The ops that ran a CUDA kernel because cuDNN / cuBLASLt could not (each said once on stderr).
  std::vector<std::string> fallbacks() const;

  // ---- memory beyond the Backend interface ------------------------------------------------
  void set_alloc_kind(cuda::MemoryKind kind);  // for the alloc() calls that follow
  T* alloc(cuda::MemoryKind kind, size_t n);
  void* alloc_bytes(cuda::MemoryKind kind, size_t bytes);  // zero-filled; tokens, targets
  void free_bytes(void* p);
  void seal_memory();
  std::string memory_report() const;
  // Host <-> device copies (synchronous: they wait for the stream).
  void to_device(void* dst, const void* src, size_t bytes);
  void to_host(void* dst, const void* src, size_t bytes);
  void synchronize();
  void* stream() const;  // the cudaStream_t every op runs on

  // ---- Backend ----------------------------------------------------------------------------
  T* alloc(size_t n) override;
  Buf<T> alloc(size_t n, Precision dtype) override;  // a type stores() refuses throws Error
  void free(void* p) override;
  // Fp32, and the 2-byte type of the GEMM math (bf16 math: Bf16; fp16 math: Fp16).
  bool stores(Precision dtype) const override;
  void zero(Buf<T> x, size_t n) override;
  void copy(Buf<T> dst, CBuf<T> src, size_t n) override;
  void convert(Buf<T> dst, CBuf<T> src, size_t n) override;  // device kernel, nearest even
  void round_to(T* x, size_t n, Precision p) override;
  void set_alloc_kind(AllocKind kind) override;  // Params/Grads/Optimizer/Activations arenas
  bool host_memory() const override { return false; }
  size_t host_scratch_bytes() const override { return 0; }  // its scratch: the workspace arena
  // to_device / to_host; 2-byte tensors converted on the host in pieces of 1 Mi elements.
  void upload(Buf<T> dst, const T* host_src, size_t n) override;
  void download(T* host_dst, CBuf<T> src, size_t n) override;
  T* alloc_host(size_t n) override;  // cudaMallocHost: pinned
  void free_host(T* p) override;
  int32_t* alloc_ids(size_t n) override;                        // activations arena
  void free_ids(int32_t* p) override;
  void upload_ids(int32_t* dst, const int32_t* host_src, size_t n) override;

  void matmul_forward(Buf<T> out, CBuf<T> inp, CBuf<T> weight, CBuf<T> bias, int N, int IC,
                      int OC) override;
  void matmul_backward(Buf<T> dinp, T* dweight, T* dbias, CBuf<T> dout, CBuf<T> inp, CBuf<T> weight,
                       int N, int IC, int OC, GradWrite write) override;

  void embedding_forward(Buf<T> out, const int32_t* tokens, CBuf<T> wte, CBuf<T> wpe, int B,
                         int Tlen, int C, int v0, int Vl) override;
  void embedding_backward(T* dwte, T* dwpe, CBuf<T> dout, const int32_t* tokens, int B, int Tlen,
                          int C, int v0, int Vl) override;

  void layernorm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, CBuf<T> w, CBuf<T> b, int N,
                         int C, T eps) override;
  void layernorm_backward(Buf<T> dinp, T* dw, T* db, CBuf<T> dout, CBuf<T> inp, CBuf<T> w,
                          const T* mean, const T* rstd, int N, int C) override;
  void rmsnorm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> w, int N, int C, T eps) override;
  void rmsnorm_backward(Buf<T> dinp, T* dw, CBuf<T> dout, CBuf<T> inp, CBuf<T> w, const T* rstd,
                        int N, int C) override;

  void add(Buf<T> out, CBuf<T> a, CBuf<T> b, size_t n) override;
  void gelu_forward(Buf<T> out, CBuf<T> inp, size_t n) override;
  void gelu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, size_t n) override;
  void swiglu_forward(Buf<T> out, CBuf<T> inp, int N, int F) override;
  void swiglu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, int N, int F) override;

  void rope_forward(Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
                    const RopeFreqs& rope) override;
  void rope_backward(Buf<T> dqkv, int B, int Tlen, int NH, int NKV, int hs,
                     const RopeFreqs& rope) override;
  void qk_norm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk, int N, int NH,
                       int NKV, int hs, T eps) override;
  void qk_norm_backward(Buf<T> dqkv, T* dwq, T* dwk, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk,
                        const T* rstd, int N, int NH, int NKV, int hs) override;

  size_t attention_state_size(int B, int Tlen, int NH) const override {  // log-sum-exp per row
    return static_cast<size_t>(B) * NH * Tlen;
  }
  void attention_forward(Buf<T> out, T* probs, CBuf<T> qkv, int B, int Tlen, int NH, int NKV,
                         int hs, T scale, const AttentionMask& mask) override;
  void attention_backward(Buf<T> dqkv, T* scratch, CBuf<T> dout, CBuf<T> qkv, CBuf<T> out,
                          const T* probs, int B, int Tlen, int NH, int NKV, int hs, T scale,
                          const AttentionMask& mask) override;
  // Context parallelism's block attention: our CUDA kernels (attention.cu) in fp32 on q, k,
  // v of any storage type, whatever the kernel set (cuDNN's graph takes no positions); qpos and
  // kpos are copied to the workspace, in stream order, at each call.
  void attention_block_forward(T* out, T* lse, CBuf<T> qkv, CBuf<T> kv, int kv_ld, const int* qpos,
                               const int* kpos, int B, int Tq, int Tk, int NH, int NKV, int hs,
                               T scale, const AttentionMask& mask, bool merge) override;
  void attention_row_dot(T* D, CBuf<T> dout, CBuf<T> out, int B, int Tq, int NH, int hs) override;
  void attention_block_backward(T* dq, T* dkv, CBuf<T> dout, CBuf<T> qkv, CBuf<T> kv, int kv_ld,
                                const T* lse, const T* D, const int* qpos, const int* kpos, int B,
                                int Tq, int Tk, int NH, int NKV, int hs, T scale,
                                const AttentionMask& mask) override;

  void ce_row_max(CBuf<T> logits, T* row_max, int N, int Vl, int v0, int V) override;
  void ce_stats(CBuf<T> logits, const T* row_max, const int32_t* targets, T* stats, int N, int Vl,
                int v0, int V) override;
  double ce_loss(Buf<T> logits, const T* row_max, const T* stats, const int32_t* targets, T* losses,
                 int N, int Vl, int v0, int V, T dloss) override;

  double sum_squares(const T* x, Segments segments) override;
  void scale(T* x, T s, size_t n) override;
  void adamw(T* param, const T* grad, T* m, T* v, Segments segments, float lr, float beta1,
             float beta2, float eps, float weight_decay, int t, float grad_scale,
             Buf<T> rounded) override;
  void sgd_momentum(T* param, const T* grad, T* buf, Segments segments, float lr, float momentum,
                    float weight_decay, float grad_scale, Buf<T> rounded) override;
  void lamb_moments(T* param, const T* grad, T* m, T* v, Segments segments, float lr, float beta1,
                    float beta2, float eps, float weight_decay, int t, float grad_scale,
                    double* sums) override;
  void lamb_update(T* param, const T* m, const T* v, Segments segments, const float* lr,
                   float beta1, float beta2, float eps, float weight_decay, int t) override;

 private:
  std::unique_ptr<cuda::Context> ctx_;
};

}  // namespace mpitrain
