// The CPU backend: one sgemm for every fp32 matmul: oneDNN's where oneDNN has AVX-512 kernels for
// the CPU and is 3.11.2 or later, else OpenBLAS's (cpu_kernels.hpp says why); attention's small
// tiles on a kernel of our own where the CPU has AVX-512 or AVX2 with FMA (attention_tiles());
// OpenBLAS's dgemm for double; OpenMP + SIMD loops for the rest. Host memory; instantiated for
// float (the trainer) and double (gradient checks).
//
// Threads: the constructor sets the OpenMP and OpenBLAS thread counts of the calling thread.
// Loops only go parallel above a work threshold, so tiny shapes do not pay for a thread team.
// Reductions over rows (bias/weight-norm gradients, embedding gradients) are parallelised over
// columns and the scalar sums over fixed chunks, so every result is bitwise deterministic and
// independent of the thread count (OpenBLAS's gemms, which an AVX2 CPU runs, are the only
// exception: oneDNN's give the same bits at any thread count, tests/unit/test_cpu_gemm.cpp).
//
// Compute tensors: Fp32 (T) always; CpuBackend<float> also stores them in bf16 / fp16 (2 bytes).
// An op on 2-byte tensors widens a block of rows of its inputs into fp32 scratch the backend owns
// (a few MB, grown on first use; one whole sequence for attention and rope), runs the fp32 kernel
// on the block and rounds its outputs into the 2-byte tensor: bit for bit the emulated path (fp32
// containers of rounded values, the same kernel, round_to). Parameter gradients, norm statistics,
// attention probabilities and the loss stay in T.
//
// Products (the linear layer) of a backend constructed for bf16 or fp16:
//   - bf16 on a CPU with bf16 instructions (AVX512-BF16 / AMX; bf16_gemms()): oneDNN bf16 matmuls
//     reading 2-byte operands as they lie in memory (fp32-container operands are converted into
//     scratch), fp32 accumulation (onto the bias), one call per product: a 2-byte result written
//     by oneDNN in bf16 (the fp32 sum rounded once), an fp32 one in fp32 (a vocabulary-long
//     product in pieces along that dimension: cpu_matmul_bf16.hpp). One primitive per shape,
//     created on first use and cached. Where oneDNN has only reference
//     code for a shape, the blocked sgemm below runs instead, said once on stderr.
//   - otherwise (fp16 always: no CPU here has fp16 arithmetic): blocked sgemm. Tiles of A, B (and
//     C where it is 2-byte) widened to fp32 scratch (at most 4 MiB each), one sgemm per tile, the
//     C tile spanning the smaller operand's whole dimension so the larger operand is converted
//     once per call; K is split only where a full-K tile would not fit. The tiling depends only
//     on the shapes, so fp32-container and 2-byte operands give the same bits.
// A backend constructed for fp32 runs one sgemm per product, as before.
#pragma once

#include <memory>
#include <string>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/backend/precision.hpp"

namespace mpitrain {

namespace cpu {
class Bf16Matmul;  // src/backend/cpu_matmul_bf16.hpp
struct Bf16MatmulDelete {
  void operator()(Bf16Matmul* p) const;
};
class Staging;  // src/backend/cpu_storage.hpp: the scratch of the 2-byte ops
struct StagingDelete {
  void operator()(Staging* p) const;
};
}  // namespace cpu

// Rows of queries (and of keys) in one tile of the CPU's flash attention (cpu_attention.cpp): 32
// against fewer than kAttentionLongKeys keys, 128 from there on. Larger tiles mean fewer, larger
// products but more masked scores on the diagonal (attention-bench, B 4 NH 12 hs 64, 2 threads,
// AMD EPYC Zen 5, ms forward + backward, tile 32 vs 128 in turn: T 64 0.74 vs 1.05, 256 7.8 vs
// 8.7, 512 13.8 vs 13.8, 768 30.3 vs 29.1, 2048 222 vs 197-209, 4096 2310 vs 1561).
inline constexpr int kAttentionTileShort = 32, kAttentionTileLong = 128;
inline constexpr int kAttentionLongKeys = 768;
inline int cpu_attention_tile(int keys) {
  return keys >= kAttentionLongKeys ? kAttentionTileLong : kAttentionTileShort;
}

// Bytes of fp32 scratch the CPU backend holds for 2-byte tensors (cpu_attention.cpp): four
// staging slots that only grow, each to its largest use. The attention widens whole sequences,
// min(B, 2^18 / (T QKV)) at a time: qkv, its keys again and dqkv (T QKV floats a sequence) and
// dout (T NH hs); blocks (context parallelism's ring): qkv, the keys and dout. The other staged
// ops take blocks of 2^18 floats, and the blocked products (fp16; bf16 where the CPU has no bf16
// kernels, counted on any CPU: a plan may be for another) tiles of up to 2^22 in the first
// three, plus 16 floats a row where a tile's rows are 1024 or more wide (2^22 + 2^16 in all:
// cpu_blocked_gemm.hpp). The trainer reports what they hold (host_scratch_bytes).
size_t cpu_staging_bytes(int B, int Tlen, int NH, int NKV, int hs, bool blocks);

// The pages behind the backend's tensors of kHugePage bytes or more (alloc: parameters,
// gradients, optimizer state, activations; --huge-pages). Huge asks the kernel for 2 MiB
// transparent huge pages (madvise MADV_HUGEPAGE), which it grants where
// /sys/kernel/mm/transparent_hugepage/enabled says always or madvise: fewer TLB misses where
// products and the optimizer stream through hundreds of MiB, and fewer page faults at start-up.
// Base keeps them to 4 KiB pages (MADV_NOHUGEPAGE), under "always" too. GPT-2 small, 1 rank x 2
// threads, AMD EPYC Zen 5 (setting "madvise"), ms/step off vs on in turn: bf16 1271-1290 vs
// 1202-1231, fp32 2260-2281 vs 2134-2138 (bench/memory.sh part 4).
enum class CpuPages { Huge, Base };
inline constexpr size_t kHugePage = size_t{2} << 20;

template <typename T>
class CpuBackend final : public Backend<T> {
 public:
  // threads <= 0: keep the current OpenMP default
  explicit CpuBackend(int threads, CpuPages pages = CpuPages::Huge);
  // matmul_precision Bf16 / Fp16: the products above (float only: Error for double).
  CpuBackend(int threads, Precision matmul_precision, CpuPages pages = CpuPages::Huge);
  int threads() const { return threads_; }
  bool bf16_gemms() const;  // constructed for bf16 on a CPU with bf16 instructions
  // What multiplies attention's tiles (cpu_attention.cpp): "bf16 tiles (AVX512-BF16)" where
  // bf16_gemms(), else "fp32 tiles (AVX-512)" or "fp32 tiles (AVX2)" on a float backend where
  // oneDNN's ISA has AVX-512, or AVX2 and the CPU FMA (cpu_fp32_tiles.hpp), else "the BLAS".
  std::string attention_tiles() const;

  T* alloc(size_t n) override;
  Buf<T> alloc(size_t n, Precision dtype) override;
  void free(void* p) override;
  bool stores(Precision dtype) const override;
  void zero(Buf<T> x, size_t n) override;
  void copy(Buf<T> dst, CBuf<T> src, size_t n) override;
  void convert(Buf<T> dst, CBuf<T> src, size_t n) override;
  void round_to(T* x, size_t n, Precision p) override;
  void set_alloc_kind(AllocKind) override {}  // one pool: host memory
  bool host_memory() const override { return true; }
  // The staging slots (cpu_storage.hpp) and the bf16 products' copies (cpu_matmul_bf16.hpp)
  size_t host_scratch_bytes() const override;
  void upload(Buf<T> dst, const T* host_src, size_t n) override { convert(dst, host_src, n); }
  void download(T* host_dst, CBuf<T> src, size_t n) override { convert(host_dst, src, n); }
  T* alloc_host(size_t n) override;  // plain host memory
  void free_host(T* p) override;
  int32_t* alloc_ids(size_t n) override;
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
  // C(M,N) = op(A)(M,K) @ op(B)(K,N) (+ C when accumulate), row-major, contiguous: A is stored
  // (K,M) when ta, B (N,K) when tb; C is rounded to its type. The paths of the header comment.
  // a_unchanged: A is unchanged since the previous product (its bf16 copy may be reused).
  void product(bool ta, bool tb, int M, int N, int K, CBuf<T> A, CBuf<T> B, bool accumulate,
               Buf<T> C, bool a_unchanged);
  // The oneDNN bf16 path of product; false (nothing written) where it does not run. bias: a row
  // of N that oneDNN adds to every row of C (then accumulate is false), or null.
  bool bf16_product(bool ta, bool tb, int M, int N, int K, CBuf<T> A, CBuf<T> B, bool accumulate,
                    Buf<T> C, bool a_unchanged, CBuf<T> bias = nullptr);

  int threads_;
  CpuPages pages_;
  Precision precision_ = Precision::Fp32;                         // of the products
  std::unique_ptr<cpu::Bf16Matmul, cpu::Bf16MatmulDelete> bf16_;  // null unless built for bf16
  std::unique_ptr<cpu::Staging, cpu::StagingDelete> staging_;
};

}  // namespace mpitrain
