#include "mpitrain/parallel/ring_attention.hpp"

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

constexpr int kKvTag = 0x5241, kDkvTag = 0x5242;  // "RA", "RB": the ring's two kinds of message

}  // namespace

size_t RingAttention::bytes(int max_batch, int local_len, int NH, int NKV, int hs,
                            Precision storage) {
  const size_t rows = static_cast<size_t>(max_batch) * local_len;
  const size_t kv = rows * 2 * NKV * hs, q = rows * NH * hs;
  return 2 * kv * element_bytes<float>(storage) +
         sizeof(float) * (q + 3 * kv + rows * NH);
}

RingAttention::RingAttention(Backend<float>& backend, Communicator& cp, const ContextChunks& chunks,
                             int max_batch, int NH, int NKV, int hs, Precision storage)
    : backend_(backend),
      cp_(cp),
      rank_(cp.rank()),
      size_(cp.size()),
      next_((cp.rank() + 1) % cp.size()),
      prev_((cp.rank() + cp.size() - 1) % cp.size()),
      max_batch_(max_batch),
      Tl_(chunks.local_len()),
      NH_(NH),
      NKV_(NKV),
      hs_(hs) {
  if (chunks.cp() != size_) MPITRAIN_THROW("ring attention: chunks for another cp size");
  for (int r = 0; r < size_; ++r) positions_.push_back(chunks.positions(r));
  const size_t rows = static_cast<size_t>(max_batch) * Tl_, kv = rows * 2 * NKV * hs;
  for (Buf<float>& b : kv_) b = backend_.alloc(kv, storage);
  out_acc_ = backend_.alloc(rows * NH * hs);
  dkv_part_ = backend_.alloc(kv);
  for (float*& a : dkv_acc_) a = backend_.alloc(kv);
  row_dot_ = backend_.alloc(rows * NH);
}

RingAttention::~RingAttention() {
  backend_.free(row_dot_);
  for (float* a : dkv_acc_) backend_.free(a);
  backend_.free(dkv_part_);
  backend_.free(out_acc_);
  for (Buf<float>& b : kv_) backend_.free(b.data());
}

void RingAttention::pack_own(Buf<float> to, CBuf<float> qkv, int B) {
  const size_t QKV = static_cast<size_t>(NH_ + 2 * NKV_) * hs_, KV = 2 * NKV_ * hs_;
  for (size_t row = 0; row < static_cast<size_t>(B) * Tl_; ++row)
    backend_.copy(to + row * KV, qkv + (row * QKV + NH_ * hs_), KV);
}

void RingAttention::start_kv_exchange(CBuf<float> send, Buf<float> recv, size_t n, int tag) {
  if (const uint16_t* half = send.half()) {
    kv_handles_.push_back(cp_.send_start(half, n, next_, tag));
    kv_handles_.push_back(cp_.recv_start(recv.half(), n, prev_, tag));
  } else {
    kv_handles_.push_back(cp_.send_start(send.full(), n, next_, tag));
    kv_handles_.push_back(cp_.recv_start(recv.full(), n, prev_, tag));
  }
}

void RingAttention::finish(std::vector<CommHandle>& handles) {
  for (CommHandle h : handles) cp_.wait(h);
  handles.clear();
}

// Step s: the block of rank (r - s), against every local query; the next block in flight.
void RingAttention::forward(Buf<float> out, float* lse, CBuf<float> qkv, int B, float scale,
                            const AttentionMask& mask) {
  if (B > max_batch_) MPITRAIN_THROW("ring attention: batch larger than sized for");
  const int QKV = (NH_ + 2 * NKV_) * hs_, KV = 2 * NKV_ * hs_;
  const size_t block = static_cast<size_t>(B) * Tl_ * KV;
  const int* qpos = positions_[rank_].data();
  pack_own(kv_[0], qkv, B);
  for (int s = 0; s < size_; ++s) {
    const int cur = s % 2, src = (rank_ - s + size_) % size_;
    if (s + 1 < size_) start_kv_exchange(kv_[cur], kv_[1 - cur], block, kKvTag);
    // step 0 reads the own keys in place; later steps the received packed block
    const CBuf<float> kv = s == 0 ? qkv + static_cast<size_t>(NH_) * hs_ : CBuf<float>(kv_[cur]);
    backend_.attention_block_forward(out_acc_, lse, qkv, kv, s == 0 ? QKV : KV, qpos,
                                     positions_[src].data(), B, Tl_, Tl_, NH_, NKV_, hs_, scale,
                                     mask, s > 0);
    finish(kv_handles_);
  }
  backend_.convert(out, out_acc_, static_cast<size_t>(B) * Tl_ * NH_ * hs_);
}

// The dK/dV accumulator of the block held at step s arrives from r-1 (it holds the steps
// before), gains this rank's part and goes on to r+1; after the last step the own block's comes
// home. The dq accumulator stays. Each step posts the accumulator's receive before the K/V
// exchange, so between two neighbours the messages start in the same order on both sides (dK/dV
// of step s-1, then K/V of step s): NCCL matches sends to receives by order, not by tag.
void RingAttention::backward(Buf<float> dqkv, CBuf<float> dout, CBuf<float> qkv, CBuf<float> out,
                             const float* lse, int B, float scale, const AttentionMask& mask) {
  if (B > max_batch_) MPITRAIN_THROW("ring attention: batch larger than sized for");
  const int QKV = (NH_ + 2 * NKV_) * hs_, KV = 2 * NKV_ * hs_, A = NH_ * hs_;
  const size_t rows = static_cast<size_t>(B) * Tl_, block = rows * KV;
  const int* qpos = positions_[rank_].data();
  backend_.attention_row_dot(row_dot_, dout, out, B, Tl_, NH_, hs_);
  backend_.zero(out_acc_, rows * A);  // the dq accumulator
  pack_own(kv_[0], qkv, B);
  CommHandle sent[2];  // the last send from each accumulator, waited before it is reused
  bool sending[2] = {false, false};
  auto receive_into = [&](int k) {
    if (sending[k]) cp_.wait(sent[k]);
    sending[k] = false;
    return cp_.recv_start(dkv_acc_[k], block, prev_, kDkvTag);
  };
  for (int s = 0; s < size_; ++s) {
    const int cur = s % 2, src = (rank_ - s + size_) % size_;
    CommHandle incoming{};
    if (s > 0) incoming = receive_into(cur);
    if (s + 1 < size_) start_kv_exchange(kv_[cur], kv_[1 - cur], block, kKvTag);
    const CBuf<float> kv = s == 0 ? qkv + static_cast<size_t>(NH_) * hs_ : CBuf<float>(kv_[cur]);
    float* part = s == 0 ? dkv_acc_[cur] : dkv_part_;  // step 0 starts the own accumulator
    backend_.zero(part, block);
    backend_.attention_block_backward(out_acc_, part, dout, qkv, kv, s == 0 ? QKV : KV, lse,
                                      row_dot_, qpos, positions_[src].data(), B, Tl_, Tl_, NH_,
                                      NKV_, hs_, scale, mask);
    finish(kv_handles_);
    if (s > 0) {
      cp_.wait(incoming);
      backend_.add(dkv_acc_[cur], dkv_acc_[cur], dkv_part_, block);
    }
    sent[cur] = cp_.send_start(dkv_acc_[cur], block, next_, kDkvTag);
    sending[cur] = true;
  }
  const int home = size_ % 2;  // the own block's accumulator, back after CP sends
  cp_.wait(receive_into(home));
  for (int k = 0; k < 2; ++k)
    if (sending[k]) cp_.wait(sent[k]);
  for (size_t row = 0; row < rows; ++row) {  // dqkv rows = [dq | dk dv], rounded to storage
    backend_.convert(dqkv + row * QKV, out_acc_ + row * A, A);
    backend_.convert(dqkv + (row * QKV + A), dkv_acc_[home] + row * KV, KV);
  }
}

}  // namespace mpitrain
