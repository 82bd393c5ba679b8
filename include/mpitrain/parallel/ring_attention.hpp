// Context parallelism's attention: a ring over the cp group (Liu et al.'s ring attention with the
// causal load balance of parallel/context_chunks.hpp, as Megatron-Core and torchtitan run it).
//
// Each cp rank holds its T/CP query rows and their keys and values. Forward: the K/V blocks
// pass around the ring, CP steps; at step s rank r holds rank (r - s)'s block, sends it on to
// r+1 and receives the next from r-1 (non-blocking) while it computes its queries against it
// (Backend::attention_block_forward, the mask from each row's sequence position); the partial
// results merge by their log-sum-exps into fp32 accumulators, rounded to the storage type once
// at the end. Backward: the same ring of K/V blocks; each step's dK/dV of a block is added to
// that block's accumulator, which travels with it and arrives back at its owner after CP sends.
// The owner's dq accumulates at home. Messages: K/V in the storage type (2-byte storage sends
// 2-byte blocks), dK/dV accumulators in fp32.
//
// Shapes: B sequences of Tl = T/CP local rows; qkv (B, Tl, (NH + 2 NKV) hs); a packed block
// (B, Tl, 2 NKV hs) = [k heads | v heads] of each row; lse (B, NH, Tl). Float models on either
// backend: on the GPU the blocks are device memory and `cp` a device communicator (NCCL, or MPI
// staged or CUDA-aware), whose sends and receives between two ranks start in the same order on
// both sides (NCCL ignores tags).
#pragma once

#include <vector>

#include "mpitrain/backend/backend.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/parallel/context_chunks.hpp"

namespace mpitrain {

class RingAttention {
 public:
  // Buffers for up to max_batch sequences of this rank's chunks (backend memory, allocated
  // once): two packed K/V blocks in `storage`, the fp32 accumulators.
  RingAttention(Backend<float>& backend, Communicator& cp, const ContextChunks& chunks,
                int max_batch, int NH, int NKV, int hs, Precision storage);
  ~RingAttention();
  RingAttention(const RingAttention&) = delete;
  RingAttention& operator=(const RingAttention&) = delete;

  // out (B, Tl, NH hs) = causal attention of the local queries over the whole sequence, masked
  // by `mask` (attention_sees: the sliding window; doc_starts (B, Tl), the local rows' document
  // starts by position); lse (B, NH, Tl) each row's log-sum-exp, kept for backward.
  void forward(Buf<float> out, float* lse, CBuf<float> qkv, int B, float scale,
               const AttentionMask& mask);
  // dqkv (B, Tl, QKV) = the gradient of qkv (overwritten), from dout and forward's out and lse.
  void backward(Buf<float> dqkv, CBuf<float> dout, CBuf<float> qkv, CBuf<float> out,
                const float* lse, int B, float scale, const AttentionMask& mask);

  // Backend memory the ring holds, in bytes (the memory plan's count).
  static size_t bytes(int max_batch, int local_len, int NH, int NKV, int hs, Precision storage);

 private:
  // Copies this rank's k, v heads of qkv into packed block `to`.
  void pack_own(Buf<float> to, CBuf<float> qkv, int B);
  // Starts sending block `send` to the next rank and receiving the previous rank's into `recv`.
  void start_kv_exchange(CBuf<float> send, Buf<float> recv, size_t n, int tag);
  void finish(std::vector<CommHandle>& handles);

  Backend<float>& backend_;
  Communicator& cp_;
  int rank_, size_, next_, prev_;
  int max_batch_, Tl_, NH_, NKV_, hs_;
  std::vector<std::vector<int>> positions_;  // per cp rank: its rows' sequence positions
  Buf<float> kv_[2];                         // packed K/V blocks in the storage type
  float* out_acc_;                           // (B, Tl, NH hs); backward: the dq accumulator
  float* dkv_part_;                          // (B, Tl, 2 NKV hs): one step's dK/dV
  float* dkv_acc_[2];                        // the travelling dK/dV accumulators
  float* row_dot_;                           // (B, NH, Tl): rowsum(dout * out) per head
  std::vector<CommHandle> kv_handles_, acc_handles_;
};

}  // namespace mpitrain
