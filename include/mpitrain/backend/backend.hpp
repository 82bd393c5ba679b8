// The compute interface the model is written against.
//
// Model code calls only these ops and never knows which backend runs them (CpuBackend,
// CudaBackend). Pointers are backend memory: host memory for the CPU backend, device memory of
// the CUDA backend's GPU (token and target ids too). Shapes follow
// llm.c's naming: B batch, T time (sequence), C channels (d_model), N = B*T rows, NH query heads,
// NKV key/value heads, hs head size, V vocabulary, Vp padded vocabulary.
//
// Conventions every implementation keeps:
//   - Weights are nn.Linear layout (out, in), row-major: y[o] = b[o] + sum_i x[i] * w[o*in + i].
//   - Backward ops ACCUMULATE into parameter gradients (dweight, dbias, dw, db) so gradient
//     accumulation over micro-batches is free, and OVERWRITE activation gradients (dinp) unless
//     the op says otherwise. matmul_backward can overwrite its dweight and dbias instead
//     (GradWrite): a step's first micro-batch then needs no zeroed gradients there.
//   - The QKV activation of one token is laid out [q (NH*hs) | k (NKV*hs) | v (NKV*hs)]; query
//     head h reads key/value head h / (NH/NKV) (grouped-query attention; NKV == NH is plain MHA).
//   - No op allocates: scratch is passed in.
//   - Compute tensors (activations, activation gradients, the compute weights) are Buf / CBuf
//     (backend/buf.hpp): stored in the run's storage type, read as T, rounded when written;
//     parameter gradients, norm statistics, attention state, the loss and the optimizer's
//     buffers are T*. An op's Bufs are all of one storage type.
// T (the scalar) is float in the trainer and double in the gradient-check tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "mpitrain/backend/buf.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/backend/rope_freqs.hpp"
#include "mpitrain/backend/unscored.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

// What an allocation holds, so a backend with separate pools (the CUDA backend's arenas) can say
// where its memory goes. The CPU backend ignores it.
enum class AllocKind { Params, Grads, Optimizer, Activations };

// How matmul_backward writes its parameter gradients: added to what they hold, or written over
// it (Model: the linear layers on a step's first micro-batch and in every lent ZeRO-2/3 unit, as
// PyTorch's first backward after zero_grad(set_to_none=True) writes them).
enum class GradWrite { Add, Overwrite };

// One tensor's part of a flat buffer: elements [at, at + n); decay: weight decay applies to it.
// The optimizer's ops take a list of them, the tensors of a step in one call (the CPU backend's
// one thread team, the CUDA backend's few launches and one wait), not a call per tensor.
struct Segment {
  size_t at = 0, n = 0;
  bool decay = false;
};
using Segments = std::span<const Segment>;

// The elements of a segment list.
inline size_t elements(Segments segments) {
  size_t n = 0;
  for (const Segment& s : segments) n += s.n;
  return n;
}

// Whether the query at position qpos sees the key at kpos: causal (kpos <= qpos); with a
// sliding window W > 0, among the W latest positions (kpos > qpos - W, transformers'
// sliding_window_overlay; flash-attn's window_size (W - 1, 0)); and not before the first
// position of the query's document, doc_start (document masking: Megatron's
// reset_attention_mask, torchtitan's block_causal). window 0: no window; doc_start 0: none.
// first_seen: the first position such a query sees.
constexpr int first_seen(int qpos, int window, int doc_start) {
  return window > 0 && qpos - window + 1 > doc_start ? qpos - window + 1 : doc_start;
}
constexpr bool attention_sees(int qpos, int kpos, int window, int doc_start = 0) {
  return kpos <= qpos && kpos >= first_seen(qpos, window, doc_start);
}

// The mask of one attention call (attention_sees): the model's sliding window and, with document
// masking, where each query row's document begins. A window alone converts to it.
struct AttentionMask {
  int window = 0;  // 0: none
  // null: each sequence is one document; else (B, Tq) in host memory: query row (b, i)'s
  // document's first position (at most the row's own; keys before it are masked).
  const int32_t* doc_starts = nullptr;

  AttentionMask(int w = 0, const int32_t* starts = nullptr) : window(w), doc_starts(starts) {}
  int doc_start(int b, int Tq, int i) const {
    return doc_starts ? doc_starts[static_cast<size_t>(b) * Tq + i] : 0;
  }
  // the mask of the sequences from b0 on
  AttentionMask from(size_t b0, int Tq) const {
    return {window, doc_starts ? doc_starts + b0 * Tq : nullptr};
  }
};

// The fused updates' compute copy (adamw's and sgd_momentum's `rounded`): null or 2-byte storage;
// an fp32 one is refused (Error) before any element is updated.
template <typename T>
void check_rounded(Buf<T> rounded) {
  if (rounded.full()) MPITRAIN_THROW("the optimizer's rounded copy must be 2-byte storage");
}

template <typename T>
class Backend {
 public:
  virtual ~Backend() = default;

  // ---- memory ------------------------------------------------------------------------------
  virtual T* alloc(size_t n) = 0;  // zero-filled, 64-byte aligned
  // n elements of storage type dtype, zero-filled, 64-byte aligned (Fp32: alloc(n)).
  virtual Buf<T> alloc(size_t n, Precision dtype) = 0;
  virtual void free(void* p) = 0;  // what either alloc returned (its data())
  // Whether compute tensors can be stored as dtype (Fp32 always).
  virtual bool stores(Precision dtype) const = 0;
  virtual void zero(Buf<T> x, size_t n) = 0;
  virtual void copy(Buf<T> dst, CBuf<T> src, size_t n) = 0;  // same storage type
  // dst = src converted to dst's type: exact when widening, rounded to nearest even when
  // narrowing (fp16 overflowing to inf). The optimizer writes the compute weights with it.
  virtual void convert(Buf<T> dst, CBuf<T> src, size_t n) = 0;
  // x = the nearest value of precision p (round to nearest even; fp16 overflows to inf): how a
  // tensor stored in bf16/fp16 is kept in T containers (backend/precision.hpp). fp32: no-op.
  virtual void round_to(T* x, size_t n, Precision p) = 0;
  // The kind of the alloc() calls that follow (default Activations).
  virtual void set_alloc_kind(AllocKind kind) = 0;

  // ---- host <-> backend memory: host code reads and writes backend memory only through these -
  virtual bool host_memory() const = 0;  // backend pointers are host memory (CPU: true)
  // Host memory the backend holds as scratch, beyond the tensors it allocated: what its ops have
  // grown it to so far (the CPU's fp32 staging of 2-byte tensors; 0 on a GPU, whose workspace is
  // device memory). Part of the peak RSS that no tensor accounts for.
  virtual size_t host_scratch_bytes() const = 0;
  // Synchronous; host values are T, converted to / from the backend tensor's type as convert().
  virtual void upload(Buf<T> dst, const T* host_src, size_t n) = 0;
  virtual void download(T* host_dst, CBuf<T> src, size_t n) = 0;
  // n T of host memory that download / upload move fastest (the CUDA backend's is pinned:
  // page-locked, DMA without a bounce buffer), zero-filled; freed with free_host. For the
  // checkpoint mirror, which is the staging buffer of a save in the background.
  virtual T* alloc_host(size_t n) = 0;
  virtual void free_host(T* p) = 0;
  // Token / target ids in backend memory (zero-filled), filled from the host.
  virtual int32_t* alloc_ids(size_t n) = 0;
  virtual void free_ids(int32_t* p) = 0;
  virtual void upload_ids(int32_t* dst, const int32_t* host_src, size_t n) = 0;

  // ---- matmul: out(N,OC) = inp(N,IC) @ weight(OC,IC)^T + bias(OC); bias may be null ----------
  virtual void matmul_forward(Buf<T> out, CBuf<T> inp, CBuf<T> weight, CBuf<T> bias, int N,
                              int IC, int OC) = 0;
  // dinp(N,IC) = dout @ weight (overwritten; skipped if null); dweight(OC,IC) += dout^T @ inp;
  // dbias(OC) += column sums of dout (skipped if null). GradWrite::Overwrite: = for += (with
  // N 0: zeros), and dweight and dbias are not read.
  virtual void matmul_backward(Buf<T> dinp, T* dweight, T* dbias, CBuf<T> dout, CBuf<T> inp,
                               CBuf<T> weight, int N, int IC, int OC, GradWrite write) = 0;

  // ---- embeddings, vocabulary-parallel: this rank holds rows [v0, v0 + Vl) of wte --------
  // out(B,T,C) = wte[tokens - v0] for tokens in that range, else 0; + wpe[t] if wpe is non-null.
  // Under tensor parallelism the ranks' outputs are summed (all-reduce), so only one passes wpe.
  virtual void embedding_forward(Buf<T> out, const int32_t* tokens, CBuf<T> wte, CBuf<T> wpe,
                                 int B, int Tlen, int C, int v0, int Vl) = 0;
  // dwte[tokens[n] - v0] += dout[n] for tokens in range; dwpe[t] += sum over b of dout[b,t]
  // (dwpe may be null).
  virtual void embedding_backward(T* dwte, T* dwpe, CBuf<T> dout, const int32_t* tokens, int B,
                                  int Tlen, int C, int v0, int Vl) = 0;

  // ---- norms over the last dim C of N rows -------------------------------------------------
  // LayerNorm: out = (x - mean) * rstd * w + b; saves mean(N), rstd(N).
  virtual void layernorm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, CBuf<T> w, CBuf<T> b,
                                 int N, int C, T eps) = 0;
  // dinp += (not =) the input gradient, so the residual stream's gradient can flow through.
  virtual void layernorm_backward(Buf<T> dinp, T* dw, T* db, CBuf<T> dout, CBuf<T> inp, CBuf<T> w,
                                  const T* mean, const T* rstd, int N, int C) = 0;
  // RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); saves rstd(N).
  virtual void rmsnorm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> w, int N, int C,
                               T eps) = 0;
  // dinp += the input gradient (as layernorm_backward).
  virtual void rmsnorm_backward(Buf<T> dinp, T* dw, CBuf<T> dout, CBuf<T> inp, CBuf<T> w,
                                const T* rstd, int N, int C) = 0;

  // ---- pointwise ---------------------------------------------------------------------------
  // out = a + b (n elements); used for the residual stream.
  virtual void add(Buf<T> out, CBuf<T> a, CBuf<T> b, size_t n) = 0;
  // GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  virtual void gelu_forward(Buf<T> out, CBuf<T> inp, size_t n) = 0;
  virtual void gelu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, size_t n) = 0;  // dinp =
  // SwiGLU on rows of inp(N, 2F) = [gate (F) | up (F)]: out(N,F) = silu(gate) * up.
  virtual void swiglu_forward(Buf<T> out, CBuf<T> inp, int N, int F) = 0;
  virtual void swiglu_backward(Buf<T> dinp, CBuf<T> inp, CBuf<T> dout, int N, int F) = 0;  // dinp =

  // ---- rotary position embedding, in place on the q and k parts of qkv(B,T,(NH+2NKV)*hs) -----
  // Pairs (2i, 2i+1) of each head rotate by angle t * rope.inv_freq(i, hs) (theta^(-2i/hs),
  // scaled; the interleaved pairs of Meta's original Llama code), times rope.attention_factor()
  // (yarn's; else 1). backward applies the inverse rotation, times that factor, to dqkv in place.
  virtual void rope_forward(Buf<T> qkv, int B, int Tlen, int NH, int NKV, int hs,
                            const RopeFreqs& rope) = 0;
  virtual void rope_backward(Buf<T> dqkv, int B, int Tlen, int NH, int NKV, int hs,
                             const RopeFreqs& rope) = 0;

  // ---- per-head q/k RMSNorm (qk_norm), on qkv(N,(NH+2NKV)*hs) -------------------------------
  // out's q heads = x rstd wq, its k heads = x rstd wk (rstd = 1/sqrt(mean(x^2) + eps) over the
  // head's hs values; wq, wk (hs) shared by the heads), its v = inp's; saves rstd(N, NH+NKV).
  virtual void qk_norm_forward(Buf<T> out, T* rstd, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk, int N,
                               int NH, int NKV, int hs, T eps) = 0;
  // In place: the q and k heads of dqkv go from d(out) to d(inp) (v untouched); dwq, dwk +=.
  virtual void qk_norm_backward(Buf<T> dqkv, T* dwq, T* dwk, CBuf<T> inp, CBuf<T> wq, CBuf<T> wk,
                                const T* rstd, int N, int NH, int NKV, int hs) = 0;

  // ---- causal self-attention ---------------------------------------------------------------
  // out(B,T,NH*hs) = softmax(scale q k^T, causal) v per head. scale is 1/sqrt(hs) but for gpt2's
  // scale_attn_weights / scale_attn_by_inverse_layer_idx.
  // mask: each query sees the keys up to its own position, but with a window W > 0 only the W
  // latest of them (Mistral's sliding window, as transformers masks it), and with doc_starts
  // none before its document's first position (AttentionMask, attention_sees).
  // `probs` is the backend's saved state, opaque to the caller, attention_state_size() elements:
  // both backends (flash attention) keep only each row's log-sum-exp (B*NH*T) and use `scratch`
  // (as large) in backward for the rows' D = rowsum(dout * out). Both must come from the same
  // backend's forward, and backward is given forward's output `out` too.
  virtual size_t attention_state_size(int B, int Tlen, int NH) const = 0;
  virtual void attention_forward(Buf<T> out, T* probs, CBuf<T> qkv, int B, int Tlen, int NH,
                                 int NKV, int hs, T scale, const AttentionMask& mask) = 0;
  // dqkv (overwritten) from dout; scratch holds attention_state_size() elements.
  virtual void attention_backward(Buf<T> dqkv, T* scratch, CBuf<T> dout, CBuf<T> qkv, CBuf<T> out,
                                  const T* probs, int B, int Tlen, int NH, int NKV, int hs, T scale,
                                  const AttentionMask& mask) = 0;

  // ---- attention of query rows against one block of key rows, by position (context parallelism)
  // q heads read from qkv(B, Tq, (NH+2NKV)*hs) (the first NH*hs columns of each row);
  // k and v heads read from kv with row stride kv_ld: row r's k head g at kv[r*kv_ld + g*hs], its
  //   v head g at kv[r*kv_ld + (NKV+g)*hs]. kv = qkv + NH*hs with kv_ld = (NH+2NKV)*hs reads this
  //   rank's own keys; kv_ld = 2*NKV*hs reads a packed block received from another rank. kv is
  //   (B, Tk, ...): sequence b's row r at kv[(b*Tk + r)*kv_ld]. The CBufs of the three block
  //   methods may each be of any storage type (unlike the other ops').
  // qpos(Tq), kpos(Tk): host memory (the profiler counts the unmasked pairs from them): each
  //   row's position in the sequence, the same for every b (any order; a
  //   tile of rows is skipped when all its queries precede all its keys, so ascending runs skip
  //   most). Query i of sequence b sees key j iff attention_sees(qpos[i], kpos[j],
  //   mask.window, mask.doc_start(b, Tq, i)) (mask.doc_starts: (B, Tq), the query rows' document
  //   starts, by position).
  // out(B, Tq, NH*hs) and lse(B, NH, Tq) are T (fp32) accumulators:
  //   merge = false: out = softmax(scale q k^T, masked) v over these keys; lse = log sum exp of
  //                  the row's scaled unmasked scores (-inf and out = 0 for a row that sees no
  //                  key);
  //   merge = true:  (out, lse) from earlier blocks are merged with this block's result:
  //                  lse' = logaddexp(lse, lse_b); out' = out exp(lse - lse') + out_b exp(lse_b -
  //                  lse') (the CPU backend continues its online softmax from m = lse, l = 1: the
  //                  same).
  // attention_forward is this with qpos = kpos = 0..T-1 and kv = qkv + NH*hs, merge = false.
  virtual void attention_block_forward(T* out, T* lse, CBuf<T> qkv, CBuf<T> kv, int kv_ld,
                                       const int* qpos, const int* kpos, int B, int Tq, int Tk,
                                       int NH, int NKV, int hs, T scale, const AttentionMask& mask,
                                       bool merge) = 0;
  // D(B, NH, Tq) = rowsum over each head's hs columns of dout * out (dout, out (B, Tq, NH*hs)).
  virtual void attention_row_dot(T* D, CBuf<T> dout, CBuf<T> out, int B, int Tq, int NH,
                                 int hs) = 0;
  // Backward of one block pair given the FINAL lse (over all blocks) and D:
  //   P = exp(scale q k^T - lse) (masked);  dv += P^T dout;  dS = P (dout v^T - D) scale;
  //   dq += dS k;  dk += dS^T q.   dq (B, Tq, NH*hs) and dkv (B, Tk, 2*NKV*hs: [dk heads | dv
  //   heads]) are T (fp32) accumulators, added to (the caller zeroes them).
  virtual void attention_block_backward(T* dq, T* dkv, CBuf<T> dout, CBuf<T> qkv, CBuf<T> kv,
                                        int kv_ld, const T* lse, const T* D, const int* qpos,
                                        const int* kpos, int B, int Tq, int Tk, int NH, int NKV,
                                        int hs, T scale, const AttentionMask& mask) = 0;

  // ---- softmax cross-entropy, vocabulary-parallel ------------------------------------------
  // logits(N, Vl) hold columns [v0, v0 + Vl) of the padded vocabulary; columns >= V are padding.
  // A row whose target is kUnscored adds no loss and has a zero gradient.
  // Three phases; under tensor parallelism the caller all-reduces between them (MAX over row_max,
  // SUM over stats), so no rank ever holds the full logits. With one rank: no communication.
  // 1) row_max(N) = max of this rank's real columns (-inf if it holds none)
  virtual void ce_row_max(CBuf<T> logits, T* row_max, int N, int Vl, int v0, int V) = 0;
  // 2) stats(2N) = [sum of exp(logit - row_max) over real columns | the target's logit if this
  //    rank holds it, else 0]
  virtual void ce_stats(CBuf<T> logits, const T* row_max, const int32_t* targets, T* stats, int N,
                        int Vl, int v0, int V) = 0;
  // 3) losses[n] = log(sumexp) + row_max - target logit (0 if unscored). If dloss != 0, logits
  //    is overwritten by its gradient (softmax - onehot(target)) * dloss, zero in padding
  //    columns and in unscored rows. Returns the sum of the N losses in double.
  virtual double ce_loss(Buf<T> logits, const T* row_max, const T* stats, const int32_t* targets,
                         T* losses, int N, int Vl, int v0, int V, T dloss) = 0;

  // ---- optimizer: over the segments of flat buffers, one call a step ------------------------
  // sum of x^2 in double over the segments (for the global grad norm): each segment's sum over
  // fixed chunks, the segments' sums added in list order, so deterministic for any thread count
  // and equal to the sum of one-segment calls added in order.
  virtual double sum_squares(const T* x, Segments segments) = 0;
  virtual void scale(T* x, T s, size_t n) = 0;
  // AdamW (decoupled weight decay: wd on the segments marked decay, 0 on the others):
  // m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; p -= lr * (m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps)
  // + wd * p). grad_scale multiplies g first. Each element's result is the same whatever list
  // it lies in (a tensor updated whole, in pieces or split over ranks gets the same bits).
  // rounded: null, or a 2-byte tensor indexed as param (the compute copy of fp32 master
  // weights) that takes the updated elements rounded, as convert() would write them, in the
  // same pass.
  virtual void adamw(T* param, const T* grad, T* m, T* v, Segments segments, float lr, float beta1,
                     float beta2, float eps, float weight_decay, int t, float grad_scale,
                     Buf<T> rounded) = 0;
  // SGD with momentum (PyTorch's buffer, no dampening) and decoupled weight decay (as adamw):
  // g = grad_scale grad; buf = mu buf + g; p -= lr (buf + wd p). rounded: as adamw's.
  virtual void sgd_momentum(T* param, const T* grad, T* buf, Segments segments, float lr,
                            float momentum, float weight_decay, float grad_scale,
                            Buf<T> rounded) = 0;
  // LAMB, first pass. Segments marked decay: m and v as in adamw, and sums[2s], sums[2s+1] =
  // {sum p^2, sum u^2} (double, fixed order) of segment s with the update direction
  // u = m/(1-b1^t) / (sqrt(v/(1-b2^t)) + eps) + wd p; their p is not changed. The others take
  // the whole AdamW step at lr without decay (trust ratio 1), sums 0. sums: 2 x segments, host.
  virtual void lamb_moments(T* param, const T* grad, T* m, T* v, Segments segments, float lr,
                            float beta1, float beta2, float eps, float weight_decay, int t,
                            float grad_scale, double* sums) = 0;
  // LAMB, second pass, on the segments marked decay: p -= lr[s] u, u from m, v, p as in the first
  // pass (lr[s]: the scheduled rate times segment s's trust ratio; host, one per segment).
  virtual void lamb_update(T* param, const T* m, const T* v, Segments segments, const float* lr,
                           float beta1, float beta2, float eps, float weight_decay, int t) = 0;
};

}  // namespace mpitrain
