// A Backend that runs another and times each op (--profile-ops, monitor/op_profile.hpp).
//
// Every op is forwarded unchanged, so a profiled run computes the same bits. Each compute op is
// timed on the calling thread (the CPU backend's ops are synchronous) and recorded with its
// FLOPs and bytes:
//   - FLOPs: 2 per multiply-add of its matrix products (attention's full T x T scores, as the
//     CPU computes them); 0 for the pointwise ops;
//   - bytes: each operand read once and each result written once, at its storage size
//     (read-modify-write gradients twice).
// Memory management and the ids are forwarded untimed. Only for a backend whose ops finish
// before they return (the CPU's): the trainer refuses --profile-ops with --device cuda.
#pragma once

#include <memory>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/monitor/op_profile.hpp"

namespace mpitrain {

class ProfilingBackend final : public Backend<float> {
 public:
  using T = float;
  ProfilingBackend(std::unique_ptr<Backend<T>> inner, OpProfile& profile);

  T* alloc(size_t n) override { return inner_->alloc(n); }
  Buf<T> alloc(size_t n, Precision dtype) override { return inner_->alloc(n, dtype); }
  void free(void* p) override { inner_->free(p); }
  bool stores(Precision dtype) const override { return inner_->stores(dtype); }
  void zero(Buf<T> x, size_t n) override;
  void copy(Buf<T> dst, CBuf<T> src, size_t n) override;
  void convert(Buf<T> dst, CBuf<T> src, size_t n) override;
  void round_to(T* x, size_t n, Precision p) override;
  void set_alloc_kind(AllocKind kind) override { inner_->set_alloc_kind(kind); }
  bool host_memory() const override { return inner_->host_memory(); }
  size_t host_scratch_bytes() const override { return inner_->host_scratch_bytes(); }
  void upload(Buf<T> dst, const T* host_src, size_t n) override;
  void download(T* host_dst, CBuf<T> src, size_t n) override;
  T* alloc_host(size_t n) override { return inner_->alloc_host(n); }
  void free_host(T* p) override { inner_->free_host(p); }
  int32_t* alloc_ids(size_t n) override { return inner_->alloc_ids(n); }
  void free_ids(int32_t* p) override { inner_->free_ids(p); }
  void upload_ids(int32_t* dst, const int32_t* host_src, size_t n) override {
    inner_->upload_ids(dst, host_src, n);
  }

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
  size_t attention_state_size(int B, int Tlen, int NH) const override {
    return inner_->attention_state_size(B, Tlen, NH);
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
  // Runs f, recording its time with the op's FLOPs and bytes.
  template <class F>
  decltype(auto) timed(OpPhase phase, const char* op, double flops, double bytes, F&& f);

  std::unique_ptr<Backend<T>> inner_;
  OpProfile& profile_;
};

}  // namespace mpitrain
