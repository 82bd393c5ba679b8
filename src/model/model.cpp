#include "mpitrain/model/model.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

Recompute parse_recompute(const std::string& name) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  throw UsageError("recompute '" + name + "' is not one of none, selective, full");
}

std::string to_string(Recompute r) {
  switch (r) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

template <typename T>
Model<T>::Model(const ModelConfig& config, Backend<T>& backend, const ModelShard& shard,
                int max_batch, int max_seq, int slots, Communicator* tp,
                const ModelOptions& options)
    : config_(config),
      options_(options),
      layout_(config, shard),
      backend_(backend),
      tp_(shard.tp > 1 ? tp : nullptr),
      max_batch_(max_batch),
      max_seq_(max_seq) {
  config_.validate();
  const ModelShard& s = layout_.shard();
  if (max_seq > config_.max_seq_len)
    throw UsageError("seq-len " + std::to_string(max_seq) + " exceeds the model's " +
                     std::to_string(config_.max_seq_len) + " positions");
  if (s.tp > 1 && tp == nullptr) MPITRAIN_THROW("tensor parallelism without a tp communicator");
  n_local_heads_ = config_.n_head / s.tp;
  n_local_kv_heads_ = config_.n_kv_head / s.tp;
  local_ff_ = 0;  // the widest local dense MLP of this stage's blocks (the gradient buffers)
  bool any_moe = false;
  for (int l = s.layer_begin; l < s.layer_end; ++l) {
    local_ff_ = std::max(local_ff_, mlp_width(l));
    any_moe = any_moe || config_.is_moe_layer(l);
  }
  local_vocab_ = config_.padded_vocab() / s.tp;
  vocab_start_ = s.tp_rank * local_vocab_;
  if (options_.sequence_parallel && s.tp > 1) {
    if (!std::is_same_v<T, float>) MPITRAIN_THROW("sequence parallelism in a double model");
    if (max_seq % s.tp != 0)
      throw UsageError("sequence-parallel: seq-len " + std::to_string(max_seq) +
                       " is not divisible by tp " + std::to_string(s.tp));
  }

  const size_t N = static_cast<size_t>(max_batch) * max_seq;
  const size_t Ns = seq_rows(static_cast<int>(N));  // the sequence-parallel region's rows
  const size_t C = config_.d_model, hs = config_.head_size(), F = local_ff_, Vl = local_vocab_;
  const size_t QKV = (n_local_heads_ + 2 * n_local_kv_heads_) * hs, A = n_local_heads_ * hs;
  auto fc_width = [&](size_t Fl) { return config_.arch == Arch::Llama ? 2 * Fl : Fl; };
  const size_t FC = fc_width(F);
  const size_t P = backend_.attention_state_size(max_batch, max_seq, n_local_heads_);
  const int E = config_.n_experts, K = config_.top_k, Fe = config_.expert_width();
  if (any_moe)  // routes this rank's Ns rows; their statistics summed over tp under sp (and cp)
    moe_ = std::make_unique<MoeLayer<T>>(
        backend_, E, K,
        MoeRouting{config_.moe_sigmoid, config_.moe_norm_topk, config_.moe_route_scale,
                   config_.moe_groups, config_.moe_group_topk, config_.moe_shared_gate},
        static_cast<int>(C), Fe, static_cast<int>(Ns), options_.moe_aux_loss_coef,
        options_.moe_z_loss_coef, options_.moe_aux_loss,
        emulated() ? options_.precision : Precision::Fp32, sp() ? tp_ : nullptr);
  if (config_.moe_expert_bias)  // the whole model's, on every rank
    expert_bias_.assign(static_cast<size_t>(config_.moe_layers(0, config_.n_layer)) * E, 0.0f);
  const size_t L = s.layer_end - s.layer_begin;

  if (options_.storage != Precision::Fp32 && options_.storage != options_.precision)
    MPITRAIN_THROW("compute tensors stored as " + to_string(options_.storage) + " in a " +
                   to_string(options_.precision) + " model");
  if (!backend_.stores(options_.storage))
    MPITRAIN_THROW("this backend does not store compute tensors as " + to_string(options_.storage));

  // Two allocations, carved in the order the header lists the buffers: the compute tensors (in
  // the storage type) and their fp32 statistics; and two host vectors, the MoE layers' router
  // state (T) and indices (int32), which their host code reads (model/moe.hpp).
  // A block's full set without probs and res3, for a dense MLP of local width Fl and, on an MoE
  // layer, the router's and experts' (model/moe.hpp); what each slot keeps per block depends on
  // recomputation. Tensors of the sequence-parallel region (header) have Ns rows, the rest N.
  const size_t qk_pre = config_.qk_norm ? N * QKV : 0;  // qk_norm's input and its statistics
  const size_t qk_stats = config_.qk_norm ? N * (n_local_heads_ + n_local_kv_heads_) : 0;
  auto block = [&](size_t Fl, bool moe) {
    return 5 * Ns * C + N * QKV + N * A + N * fc_width(Fl) + N * Fl + qk_pre +
           (moe ? MoeLayer<T>::kept_acts(Ns, K, C, Fe) : 0);
  };
  const size_t block_stats = 4 * Ns + qk_stats;
  auto block_router = [&](bool moe) {
    return moe ? MoeLayer<T>::kept_stats(Ns, E, K, C, config_.moe_shared_gate) : 0;
  };
  auto block_ids = [&](bool moe) { return moe ? MoeLayer<T>::kept_ids(Ns, E, K) : 0; };
  const Recompute rc = options_.recompute;
  const bool full = rc == Recompute::Full, none = rc == Recompute::None;
  const size_t shared_atty = rc == Recompute::Selective ? N * A : 0;  // recomputed with probs
  size_t kept = 0, kept_stats = 0, kept_router = 0, kept_ids = 0;  // over this stage's blocks
  for (int l = s.layer_begin; l < s.layer_end; ++l) {
    const bool moe = config_.is_moe_layer(l);
    kept += full ? Ns * C : block(mlp_width(l), moe) - shared_atty + Ns * C;
    kept_stats += full ? 0 : block_stats;
    kept_router += full ? 0 : block_router(moe);
    kept_ids += full ? 0 : block_ids(moe);
  }
  const size_t per_slot = Ns * C + kept + (s.last_stage ? Ns * C + N * Vl : 0);
  const size_t per_slot_stats = kept_stats + L * (none ? P : 0) + (s.last_stage ? 2 * Ns : 0);
  const size_t gathers = sp() ? N * C : 0;
  const size_t moe_scratch = any_moe ? MoeLayer<T>::scratch_acts(Ns, K, C, Fe) : 0;
  const size_t moe_scratch_stats = any_moe ? MoeLayer<T>::scratch_stats(Ns, E, K, C) : 0;
  const size_t grad_acts =
      Ns * C + N * C + gathers + N * QKV + N * A + N * FC + N * F + moe_scratch;
  const size_t grad_stats = P + 4 * N;
  // full: one set of every block's buffers (the widest MLP, the MoE layer's) shared by all
  activation_count_ = (full ? block(F, any_moe) : shared_atty) + slots * per_slot + grad_acts;
  stats_count_ = (full ? block_stats : 0) + (none ? 0 : P) + slots * per_slot_stats + grad_stats;
  moe_router_.assign((full ? block_router(any_moe) : 0) + slots * kept_router + moe_scratch_stats,
                     T(0));
  moe_ids_.assign((full ? block_ids(any_moe) : 0) + slots * kept_ids, 0);
  backend_.set_alloc_kind(AllocKind::Activations);
  acts_ = backend_.alloc(activation_count_, options_.storage);
  stats_ = backend_.alloc(stats_count_);
  Buf<T> cursor = acts_;
  T* stats_cursor = stats_;
  T* router_cursor = moe_router_.data();
  int32_t* ids_cursor = moe_ids_.data();
  auto take = [&](size_t n) { Buf<T> b = cursor; cursor = cursor + n; return b; };
  auto take_stats = [&](size_t n) { T* ptr = stats_cursor; stats_cursor += n; return ptr; };
  // everything but probs and res3 (atty unless shared), for a dense MLP of local width Fl
  auto carve_block = [&](LayerActs& a, size_t Fl, bool moe) {
    a.ln1 = take(Ns * C); a.ln1_mean = take_stats(Ns); a.ln1_rstd = take_stats(Ns);
    a.qkv = take(N * QKV);
    a.qkv_pre = config_.qk_norm ? take(qk_pre) : nullptr;
    a.qk_rstd = config_.qk_norm ? take_stats(qk_stats) : nullptr;
    if (!a.atty) a.atty = take(N * A);
    a.attproj = take(Ns * C); a.res2 = take(Ns * C);
    a.ln2 = take(Ns * C); a.ln2_mean = take_stats(Ns); a.ln2_rstd = take_stats(Ns);
    a.fch = take(N * fc_width(Fl)); a.fch_act = take(N * Fl);
    a.fcproj = take(Ns * C);
    if (moe) moe_->carve(a.moe, cursor, router_cursor, ids_cursor);
  };
  LayerActs work{};  // recomputed buffers, shared by every block of every slot
  if (full) carve_block(work, F, any_moe);
  if (!none) work.probs = take_stats(P);
  if (shared_atty) work.atty = take(shared_atty);
  slots_.resize(slots);
  for (SlotActs& sa : slots_) {
    sa.encoded = take(Ns * C);
    sa.layers.resize(L);
    for (size_t i = 0; i < L; ++i) {
      LayerActs& a = sa.layers[i];
      const int l = s.layer_begin + static_cast<int>(i);
      a = work;
      if (!full) carve_block(a, mlp_width(l), config_.is_moe_layer(l));
      if (none) a.probs = take_stats(P);
      a.res3 = take(Ns * C);
    }
    sa.lnf = sa.logits = nullptr;
    sa.lnf_mean = sa.lnf_rstd = nullptr;
    if (s.last_stage) {
      sa.lnf = take(Ns * C); sa.lnf_mean = take_stats(Ns); sa.lnf_rstd = take_stats(Ns);
      sa.logits = take(N * Vl);
    }
  }
  grad_.dres = take(Ns * C); grad_.dln = take(N * C);
  gathered_ = sp() ? take(gathers) : nullptr;
  grad_.dqkv = take(N * QKV); grad_.datty = take(N * A); grad_.att_scratch = take_stats(P);
  grad_.dfch = take(N * FC); grad_.dfch_act = take(N * F);
  grad_.losses = take_stats(N); grad_.row_max = take_stats(N); grad_.ce_stats = take_stats(2 * N);
  if (moe_) {
    moe_->set_scratch(take(moe_scratch), router_cursor);
    router_cursor += moe_scratch_stats;
  }
  if (cursor.data() != (acts_ + activation_count_).data() ||
      stats_cursor != stats_ + stats_count_ ||
      router_cursor != moe_router_.data() + moe_router_.size() ||
      ids_cursor != moe_ids_.data() + moe_ids_.size())
    MPITRAIN_THROW("activation layout does not add up");
  for (int l = s.layer_begin; l < s.layer_end; ++l)
    if (config_.is_moe_layer(l))
      moe_stats_.push_back({l, 0, 0, std::vector<int64_t>(static_cast<size_t>(E), 0), 0});
  routed_.assign(slots * static_cast<size_t>(config_.n_experts), 0);
  pooled_.assign(static_cast<size_t>(config_.n_experts), 0.0);

  if (options_.lend_params && !options_.lend_grads)
    MPITRAIN_THROW("parameters lent without their gradients");
  backend_.set_alloc_kind(AllocKind::Params);
  if (!options_.lend_params) params_ = backend_.alloc(layout_.total(), options_.storage);
  backend_.set_alloc_kind(AllocKind::Grads);
  if (!options_.lend_grads) {
    grads_ = backend_.alloc(layout_.total());
    added_ = added_gradient_ranges(layout_, {0, layout_.total()});
  }
  backend_.set_alloc_kind(AllocKind::Activations);
  for (const FlatRange& u : layout_.units()) {  // lent units: null until taken
    unit_params_.push_back(params_ ? CBuf<T>(params_ + u.lo) : CBuf<T>(nullptr));
    unit_grads_.push_back(grads_ ? grads_ + u.lo : nullptr);
  }
}

template <typename T>
Model<T>::~Model() {
  if (grads_) backend_.free(grads_);
  if (params_) backend_.free(params_.data());
  backend_.free(stats_);
  backend_.free(acts_.data());
}

template <typename T>
void Model<T>::zero_grads() {
  if (!grads_) return;
  for (const FlatRange& r : added_) backend_.zero(grads_ + r.lo, r.size());
  overwrite_grads_ = true;
}

bool backward_writes_whole(const ParamLayout& layout, Slot slot) {
  switch (slot) {
    case Slot::QkvW:
    case Slot::QkvB:
    case Slot::ProjW:
    case Slot::ProjB:
    case Slot::FcW:
    case Slot::FcB:
    case Slot::FcProjW:
    case Slot::FcProjB:
      return true;
    default:
      return layout.shard().last_stage && slot == layout.head_slot();
  }
}

std::vector<FlatRange> added_gradient_ranges(const ParamLayout& layout, FlatRange r) {
  std::vector<FlatRange> added;
  for (const ParamTensor& t : layout.tensors()) {  // in layout order: neighbours join
    const size_t lo = std::max(r.lo, t.offset), hi = std::min(r.hi, t.offset + t.numel);
    if (lo >= hi || backward_writes_whole(layout, t.slot)) continue;
    if (!added.empty() && added.back().hi == lo - r.lo)
      added.back().hi = hi - r.lo;
    else
      added.push_back({lo - r.lo, hi - r.lo});
  }
  return added;
}

template <typename T>
std::vector<MoeLayerStats> Model<T>::take_moe_stats() {
  std::vector<MoeLayerStats> taken = moe_stats_;
  for (MoeLayerStats& st : moe_stats_) {
    st.aux_loss = st.z_loss = 0;
    std::fill(st.tokens_per_expert.begin(), st.tokens_per_expert.end(), 0);
    st.rows = 0;
  }
  return taken;
}

template <typename T>
void Model<T>::take_params(int u, bool backward) {
  if (u >= 0 && options_.lend_params) unit_params_[u] = lender_->params(u, backward);
}

template <typename T>
void Model<T>::give_params(int u, bool backward) {
  if (u < 0 || !options_.lend_params) return;
  lender_->params_done(u, backward);
  unit_params_[u] = nullptr;
}

template <typename T>
void Model<T>::take_grads(int u) {
  if (u >= 0 && options_.lend_grads && !unit_grads_[u]) unit_grads_[u] = lender_->grads(u);
}

template <typename T>
void Model<T>::give_grads(int u) {
  if (u < 0 || !options_.lend_grads) return;
  lender_->grads_done(u);
  unit_grads_[u] = nullptr;
}

template <typename T>
std::array<int, 2> Model<T>::embedding_units() const {
  if (!layout_.shard().first_stage) return {-1, -1};
  return {layout_.unit_of(Slot::Wte), layout_.has(Slot::Wpe) ? layout_.unit_of(Slot::Wpe) : -1};
}

template <typename T>
std::array<int, 2> Model<T>::head_units() const {
  if (!layout_.shard().last_stage) return {-1, -1};
  return {layout_.unit_of(Slot::LnfW), layout_.unit_of(head_slot())};
}

template <typename T>
typename Model<T>::Dims Model<T>::dims(int B, int Tlen) const {
  const int N = B * Tlen, C = config_.d_model, F = local_ff_, hs = config_.head_size();
  const int NH = n_local_heads_, NKV = n_local_kv_heads_;
  const int FC = config_.arch == Arch::Llama ? 2 * F : F;
  return {N, C, F, hs, NH, NKV, (NH + 2 * NKV) * hs, NH * hs, FC, static_cast<size_t>(N) * C};
}

template <typename T>
void Model<T>::set_expert_parallel(Communicator* ep, Communicator* ep_data) {
  if (ep && ep->size() != layout_.shard().ep)
    MPITRAIN_THROW("an expert-parallel group of " + std::to_string(ep->size()) +
                   " ranks for a shard split over ep " + std::to_string(layout_.shard().ep));
  if (moe_) moe_->set_expert_parallel(ep, ep_data);
}

template <typename T>
void Model<T>::set_routing_groups(Communicator* tp, Communicator* cp) {
  if (moe_) moe_->set_statistics_groups(sp() ? tp : nullptr, cp);
}

template <typename T>
void Model<T>::set_context_parallel(Communicator* cp, const ContextChunks& chunks) {
  if constexpr (std::is_same_v<T, float>) {
    if (chunks.local_len() != max_seq_)
      MPITRAIN_THROW("context parallelism: the model is sized for other chunks");
    ring_ = std::make_unique<RingAttention>(backend_, *cp, chunks, max_batch_, n_local_heads_,
                                            n_local_kv_heads_, config_.head_size(),
                                            options_.storage);
    positions_ = chunks.positions();
    ring_bytes_ = RingAttention::bytes(max_batch_, max_seq_, n_local_heads_, n_local_kv_heads_,
                                       config_.head_size(), options_.storage);
  } else {
    MPITRAIN_THROW("context parallelism runs in float models only");
  }
}

template <typename T>
template <typename Fn>
void Model<T>::for_position_runs(int B, int Tlen, const int32_t* doc_starts, Fn fn) const {
  doc_starts = position_starts(doc_starts);
  if (positions_.empty() && !doc_starts) return fn(0, B, Tlen, 0);
  for (int b = 0; b < B; ++b) {
    const auto pos = [&](int i) {  // row i's position: in the sequence, or in its document
      const int at = positions_.empty() ? i : positions_[i];
      return doc_starts ? at - doc_starts[static_cast<size_t>(b) * Tlen + i] : at;
    };
    for (int i0 = 0, i = 1; i0 < Tlen; i0 = i++) {
      while (i < Tlen && pos(i) == pos(i - 1) + 1) ++i;
      fn(static_cast<size_t>(b) * Tlen + i0, 1, i - i0, pos(i0));
    }
  }
}

template <typename T>
void Model<T>::apply_rope(Buf<T> qkv, int B, int Tlen, bool backward, const int32_t* doc_starts) {
  const auto [N, C, F, hs, NH, NKV, QKV, A, FC, NC] = dims(B, Tlen);
  for_position_runs(B, Tlen, doc_starts, [&](size_t row, int b, int t, int pos) {
    RopeFreqs freqs = rope();
    freqs.first_position = pos;
    if (backward)
      backend_.rope_backward(qkv + row * QKV, b, t, NH, NKV, hs, freqs);
    else
      backend_.rope_forward(qkv + row * QKV, b, t, NH, NKV, hs, freqs);
  });
  lp(qkv, static_cast<size_t>(N) * QKV);
}

template <typename T>
void Model<T>::attention_forward(LayerActs& a, int l, int B, int Tlen, const AttentionMask& mask) {
  const auto [N, C, F, hs, NH, NKV, QKV, A, FC, NC] = dims(B, Tlen);
  if constexpr (std::is_same_v<T, float>)
    if (ring_) {
      if (Tlen != max_seq_) MPITRAIN_THROW("context parallelism: rows other than the chunks");
      ring_->forward(a.atty, a.probs, a.qkv, B, attention_scale(l), mask);
      lp(a.atty, static_cast<size_t>(N) * A);
      return;
    }
  backend_.attention_forward(a.atty, a.probs, a.qkv, B, Tlen, NH, NKV, hs, attention_scale(l),
                             mask);
  lp(a.atty, static_cast<size_t>(N) * A);
}

template <typename T>
void Model<T>::attention_backward(LayerActs& a, int l, int B, int Tlen, const AttentionMask& mask) {
  const auto [N, C, F, hs, NH, NKV, QKV, A, FC, NC] = dims(B, Tlen);
  GradActs& d = grad_;
  if constexpr (std::is_same_v<T, float>)
    if (ring_) {
      ring_->backward(d.dqkv, d.datty, a.qkv, a.atty, a.probs, B, attention_scale(l), mask);
      lp(d.dqkv, static_cast<size_t>(N) * QKV);
      return;
    }
  backend_.attention_backward(d.dqkv, d.att_scratch, d.datty, a.qkv, a.atty, a.probs, B, Tlen, NH,
                              NKV, hs, attention_scale(l), mask);
  lp(d.dqkv, static_cast<size_t>(N) * QKV);
}

template <typename T>
T Model<T>::attention_scale(int l) const {
  T scale = config_.scale_attn_weights ? T(1) / std::sqrt(T(config_.head_size())) : T(1);
  if (config_.scale_attn_by_inverse_layer_idx) scale /= T(l + 1);
  return scale;
}

template <typename T>
void Model<T>::tp_sum(Buf<T> x, size_t n) {
  if (!tp_) return;
  lp(x, n);
  if (T* full = x.full())
    tp_->all_reduce(full, n, ReduceOp::Sum);
  else if constexpr (std::is_same_v<T, float>)
    tp_->all_reduce(x.half(), n, x.dtype(), ReduceOp::Sum);
}

template <typename T>
CBuf<T> Model<T>::gather_rows(CBuf<T> x, size_t n) {
  if (!sp()) return x;
  if constexpr (std::is_same_v<T, float>) {
    if (const float* full = x.full())
      tp_->all_gather(full, gathered_.full(), n);
    else
      tp_->all_gather(x.half(), gathered_.half(), n);
  }
  return gathered_;
}

template <typename T>
void Model<T>::sum_rows(Buf<T> full, Buf<T> out, size_t n) {
  if (!sp()) return tp_sum(full, n);
  lp(full, n * tp_->size());  // the emulated path: partial sums rounded, as 2-byte messages are
  if constexpr (std::is_same_v<T, float>) {
    if (float* f = full.full())
      tp_->reduce_scatter(f, out.full(), n, ReduceOp::Sum);
    else
      tp_->reduce_scatter(full.half(), out.half(), n, full.dtype(), ReduceOp::Sum);
  }
}

template <typename T>
bool Model<T>::tp_partial_grad(Slot slot) const {
  if (slot == Slot::QNormW || slot == Slot::KNormW) return true;  // partial over each rank's heads
  const bool norm = slot == Slot::Ln1W || slot == Slot::Ln1B || slot == Slot::Ln2W ||
                    slot == Slot::Ln2B || slot == Slot::LnfW || slot == Slot::LnfB;
  const bool routed = slot == Slot::RouterW || slot == Slot::ExpertFcW ||
                      slot == Slot::ExpertProjW || slot == Slot::SharedGateW;
  return (norm || routed) && sp();  // partial over each rank's rows
}

template <typename T>
void Model<T>::norm_forward(Buf<T> out, T* mean, T* rstd, CBuf<T> inp, Slot w, Slot b, int layer,
                            int N) {
  const int C = config_.d_model;
  if (config_.arch == Arch::Gpt2)
    backend_.layernorm_forward(out, mean, rstd, inp, p(w, layer), p(b, layer), N, C,
                               static_cast<T>(config_.norm_eps));
  else
    backend_.rmsnorm_forward(out, rstd, inp, p(w, layer), N, C, static_cast<T>(config_.norm_eps));
}

template <typename T>
void Model<T>::norm_backward(Buf<T> dinp, CBuf<T> dout, CBuf<T> inp, const T* mean,
                             const T* rstd, Slot w, Slot b, int layer, int N) {
  const int C = config_.d_model;
  if (config_.arch == Arch::Gpt2)
    backend_.layernorm_backward(dinp, g(w, layer), g(b, layer), dout, inp, p(w, layer), mean, rstd,
                                N, C);
  else
    backend_.rmsnorm_backward(dinp, g(w, layer), dout, inp, p(w, layer), rstd, N, C);
}

// Vocabulary-parallel cross-entropy: the tp ranks agree on each row's max and sums, then each
// turns its own logit columns into their gradient.
template <typename T>
double Model<T>::loss(SlotActs& a, const int32_t* targets, int N, T dloss) {
  const int V = config_.vocab_size;
  backend_.ce_row_max(a.logits, grad_.row_max, N, local_vocab_, vocab_start_, V);
  if (tp_) tp_->all_reduce(grad_.row_max, N, ReduceOp::Max);
  backend_.ce_stats(a.logits, grad_.row_max, targets, grad_.ce_stats, N, local_vocab_,
                    vocab_start_, V);
  if (tp_) tp_->all_reduce(grad_.ce_stats, 2 * static_cast<size_t>(N), ReduceOp::Sum);
  return backend_.ce_loss(a.logits, grad_.row_max, grad_.ce_stats, targets, grad_.losses, N,
                          local_vocab_, vocab_start_, V, dloss);
}

template <typename T>
void Model<T>::block_forward(LayerActs& a, CBuf<T> x, int l, int B, int Tlen,
                             const AttentionMask& mask, MoeLayerStats* moe_stats) {
  const auto [N, C, Fmax, hs, NH, NKV, QKV, A, FCmax, NC] = dims(B, Tlen);
  const int F = mlp_width(l), FC = config_.arch == Arch::Llama ? 2 * F : F;  // this layer's
  const size_t NF = static_cast<size_t>(N) * F;
  const int Ns = seq_rows(N);  // the residual stream's and the norms' rows on this rank
  const size_t NsC = static_cast<size_t>(Ns) * C;
  // attention half: res2 = x + proj(attn(norm(x)))
  norm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, Slot::Ln1W, Slot::Ln1B, l, Ns);
  lp(a.ln1, NsC);
  const Buf<T> qkv_out = config_.qk_norm ? a.qkv_pre : a.qkv;  // the q/k norm then writes qkv
  backend_.matmul_forward(qkv_out, gather_rows(a.ln1, NsC), p(Slot::QkvW, l),
                          maybe_p(Slot::QkvB, l), N, C, QKV);
  lp(qkv_out, static_cast<size_t>(N) * QKV);
  if (config_.qk_norm) {
    backend_.qk_norm_forward(a.qkv, a.qk_rstd, a.qkv_pre, p(Slot::QNormW, l), p(Slot::KNormW, l), N,
                             NH, NKV, hs, static_cast<T>(config_.norm_eps));
    lp(a.qkv, static_cast<size_t>(N) * QKV);
  }
  if (config_.arch == Arch::Llama) apply_rope(a.qkv, B, Tlen, false, mask.doc_starts);
  attention_forward(a, l, B, Tlen, mask);
  backend_.matmul_forward(partial_rows(a.attproj), a.atty, p(Slot::ProjW, l),
                          row_parallel_bias(Slot::ProjB, l), N, A, C);
  sum_rows(partial_rows(a.attproj), a.attproj, NsC);
  lp(a.attproj, NsC);
  backend_.add(a.res2, x, a.attproj, NsC);
  lp(a.res2, NsC);
  // MLP half: res3 = res2 + proj(act(fc(norm(res2)))) (an MoE layer: its shared experts, if
  // any, + the routed experts on this rank's rows, after the shared experts' tp sum)
  norm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, Slot::Ln2W, Slot::Ln2B, l, Ns);
  lp(a.ln2, NsC);
  if (F > 0) {
    backend_.matmul_forward(a.fch, gather_rows(a.ln2, NsC), p(Slot::FcW, l),
                            maybe_p(Slot::FcB, l), N, C, FC);
    lp(a.fch, static_cast<size_t>(N) * FC);
    if (config_.arch == Arch::Llama)
      backend_.swiglu_forward(a.fch_act, a.fch, N, F);
    else
      backend_.gelu_forward(a.fch_act, a.fch, NF);
    lp(a.fch_act, NF);
    backend_.matmul_forward(partial_rows(a.fcproj), a.fch_act, p(Slot::FcProjW, l),
                            row_parallel_bias(Slot::FcProjB, l), N, F, C);
    sum_rows(partial_rows(a.fcproj), a.fcproj, NsC);
    lp(a.fcproj, NsC);
  }
  if (config_.is_moe_layer(l))  // fcproj (+)= the routed experts' output
    moe_->forward(a.moe, a.fcproj, F > 0, a.ln2, p(Slot::RouterW, l), maybe_p(Slot::SharedGateW, l),
                  p(Slot::ExpertFcW, l), p(Slot::ExpertProjW, l),
                  expert_bias_.empty()
                      ? nullptr
                      : expert_bias_.data() +
                            static_cast<size_t>(config_.moe_layers(0, l)) * config_.n_experts,
                  Ns, moe_stats);
  backend_.add(a.res3, a.res2, a.fcproj, NsC);
  lp(a.res3, NsC);
}

template <typename T>
double Model<T>::forward(int slot, const int32_t* tokens, const int32_t* targets, int B, int Tlen,
                         LossWeights<T> weights, const int32_t* doc_starts) {
  if (B > max_batch_ || Tlen > max_seq_) MPITRAIN_THROW("batch larger than the model was sized for");
  const ModelShard& s = layout_.shard();
  const auto [N, C, F, hs, NH, NKV, QKV, A, FC, NC] = dims(B, Tlen);
  if (sp() && N % s.tp != 0)
    MPITRAIN_THROW("sequence parallelism: " + std::to_string(N) + " rows over tp " +
                   std::to_string(s.tp));
  const int Ns = seq_rows(N);
  const size_t NsC = static_cast<size_t>(Ns) * C;
  SlotActs& sa = slots_[slot];
  sa.dloss = weights.moe;

  if (s.first_stage) {
    const std::array<int, 2> units = embedding_units();
    for (int u : units) take_params(u, false);
    const CBuf<T> wpe = s.tp_rank == 0 ? maybe_p(Slot::Wpe) : nullptr;  // added once before the sum
    const Buf<T> encoded = partial_rows(sa.encoded);  // all N rows, summed into this rank's
    for_position_runs(B, Tlen, doc_starts, [&](size_t row, int b, int t, int pos) {  // wpe from pos
      backend_.embedding_forward(encoded + row * C, tokens + row, p(Slot::Wte),
                                 wpe ? wpe + static_cast<size_t>(pos) * C : nullptr, b, t, C,
                                 vocab_start_, local_vocab_);
    });
    for (int u : units) give_params(u, false);
    sum_rows(partial_rows(sa.encoded), sa.encoded, NsC);
    lp(sa.encoded, NsC);
  }
  CBuf<T> x = sa.encoded;  // (N,C) the residual stream entering each block
  const AttentionMask mask(config_.sliding_window, doc_starts);
  MoeLayerStats* moe_stats = moe_stats_.data();  // the next MoE layer's
  const std::span<int64_t> routed = routed_counts(slot);
  std::fill(routed.begin(), routed.end(), 0);
  for (int i = 0; i < s.layer_end - s.layer_begin; ++i) {
    const int l = s.layer_begin + i, u = layout_.unit_of(Slot::Ln1W, l);
    take_params(u, false);
    block_forward(sa.layers[i], x, l, B, Tlen, mask,
                  config_.is_moe_layer(l) ? moe_stats++ : nullptr);
    give_params(u, false);
    if (config_.is_moe_layer(l))  // the micro-batch's counts (moe.hpp), before the next layer's
      for (size_t e = 0; e < routed.size(); ++e) routed[e] += sa.layers[i].moe.counts[e];
    x = sa.layers[i].res3;
  }
  if (!s.last_stage) return 0.0;
  const std::array<int, 2> units = head_units();
  for (int u : units) take_params(u, false);
  norm_forward(sa.lnf, sa.lnf_mean, sa.lnf_rstd, x, Slot::LnfW, Slot::LnfB, -1, Ns);
  lp(sa.lnf, NsC);
  backend_.matmul_forward(sa.logits, gather_rows(sa.lnf, NsC), p(head_slot()), nullptr, N, C,
                          local_vocab_);
  for (int u : units) give_params(u, false);
  lp(sa.logits, static_cast<size_t>(N) * local_vocab_);  // the loss itself is taken in fp32
  return targets ? loss(sa, targets, N, weights.scored) : 0.0;
}

template <typename T>
void Model<T>::backward(int slot, const int32_t* tokens, int B, int Tlen,
                        const std::function<void(size_t)>& grads_ready, const int32_t* doc_starts) {
  const ModelConfig& c = config_;
  const ModelShard& s = layout_.shard();
  const auto [N, C, F, hs, NH, NKV, QKV, A, FC, NC] = dims(B, Tlen);
  const bool llama = c.arch == Arch::Llama;
  const int Ns = seq_rows(N);
  const size_t NsC = static_cast<size_t>(Ns) * C;
  SlotActs& sa = slots_[slot];
  GradActs& d = grad_;
  const AttentionMask mask(c.sliding_window, doc_starts);
  const Buf<T> dln_rows = sp() ? gathered_ : d.dln;  // this rank's rows of a norm's output gradient
  auto ready = [&](size_t offset) {
    if (grads_ready) grads_ready(offset);
  };
  const bool pooled = moe_ && options_.moe_aux_loss == MoeAuxLoss::AllLayers;
  if (pooled) {  // w_e = C_e / L^2 over the model's L MoE layers (model/moe.hpp)
    const double L = c.moe_layers(0, c.n_layer);
    const std::span<const int64_t> routed = routed_counts(slot);
    for (size_t e = 0; e < pooled_.size(); ++e) pooled_[e] = routed[e] / (L * L);
  }

  const std::array<int, 2> embedding = embedding_units();
  if (s.last_stage) {
    // head: logits hold dlogits (left by forward's cross-entropy)
    const std::array<int, 2> units = head_units();
    for (int u : units) {
      take_params(u, true);
      take_grads(u);
    }
    const CBuf<T> x = sa.layers.back().res3;
    lp(sa.logits, static_cast<size_t>(N) * local_vocab_);
    backend_.matmul_backward(d.dln, g(head_slot()), nullptr, sa.logits, gather_rows(sa.lnf, NsC),
                             p(head_slot()), N, C, local_vocab_, grad_write(head_slot()));
    sum_rows(d.dln, dln_rows, NsC);
    lp(dln_rows, NsC);
    backend_.zero(d.dres, NsC);
    norm_backward(d.dres, dln_rows, x, sa.lnf_mean, sa.lnf_rstd, Slot::LnfW, Slot::LnfB, -1, Ns);
    lp(d.dres, NsC);
    for (int u : units) give_params(u, true);
    give_grads(units[0]);
    if (units[1] != embedding[0]) give_grads(units[1]);  // the tied wte waits for the embedding
    ready(layout_.offset(Slot::LnfW));
  }
  for (int i = s.layer_end - s.layer_begin - 1; i >= 0; --i) {
    const int l = s.layer_begin + i;
    LayerActs& a = sa.layers[i];
    const CBuf<T> x = i == 0 ? sa.encoded : sa.layers[i - 1].res3;
    const int u = layout_.unit_of(Slot::Ln1W, l);
    take_params(u, true);
    take_grads(u);
    if (options_.recompute == Recompute::Full) block_forward(a, x, l, B, Tlen, mask, nullptr);
    // MLP half: d res3 flows to res2 unchanged (dres) and into the MLP branch
    mlp_backward(a, l, B, Tlen, dln_rows, sa.dloss, pooled ? pooled_.data() : nullptr);
    norm_backward(d.dres, dln_rows, a.res2, a.ln2_mean, a.ln2_rstd, Slot::Ln2W, Slot::Ln2B, l, Ns);
    lp(d.dres, NsC);
    // attention half: dres is now d res2; it flows to x unchanged and into the attention branch
    if (options_.recompute == Recompute::Selective)  // attention's output and state, from qkv
      attention_forward(a, l, B, Tlen, mask);
    backend_.matmul_backward(d.datty, g(Slot::ProjW, l), maybe_g(Slot::ProjB, l),
                             gather_rows(d.dres, NsC), a.atty, p(Slot::ProjW, l), N, A, C,
                             grad_write(Slot::ProjW));
    lp(d.datty, static_cast<size_t>(N) * A);
    attention_backward(a, l, B, Tlen, mask);
    if (llama) apply_rope(d.dqkv, B, Tlen, true, doc_starts);
    if (c.qk_norm) {
      backend_.qk_norm_backward(d.dqkv, g(Slot::QNormW, l), g(Slot::KNormW, l), a.qkv_pre,
                                p(Slot::QNormW, l), p(Slot::KNormW, l), a.qk_rstd, N, NH, NKV, hs);
      lp(d.dqkv, static_cast<size_t>(N) * QKV);
    }
    backend_.matmul_backward(d.dln, g(Slot::QkvW, l), maybe_g(Slot::QkvB, l), d.dqkv,
                             gather_rows(a.ln1, NsC), p(Slot::QkvW, l), N, C, QKV,
                             grad_write(Slot::QkvW));
    sum_rows(d.dln, dln_rows, NsC);
    lp(dln_rows, NsC);
    norm_backward(d.dres, dln_rows, x, a.ln1_mean, a.ln1_rstd, Slot::Ln1W, Slot::Ln1B, l, Ns);
    lp(d.dres, NsC);
    give_params(u, true);
    give_grads(u);
    ready(layout_.offset(Slot::Ln1W, l));
  }
  if (s.first_stage) {
    for (int u : embedding) take_grads(u);
    T* dwpe = maybe_g(Slot::Wpe);
    const CBuf<T> dres = gather_rows(d.dres, NsC);  // all N rows
    // positions 0..T-1 in every sequence, or runs (cp's chunks, documents)
    const bool runs = !positions_.empty() || position_starts(doc_starts);
    backend_.embedding_backward(g(Slot::Wte), runs ? nullptr : dwpe, dres, tokens, B, Tlen, C,
                                vocab_start_, local_vocab_);
    if (dwpe && runs)  // the runs' wpe rows: Vl 0 leaves dwte alone
      for_position_runs(B, Tlen, doc_starts, [&](size_t row, int b, int t, int pos) {
        backend_.embedding_backward(g(Slot::Wte), dwpe + static_cast<size_t>(pos) * C,
                                    dres + row * C, tokens + row, b, t, C, vocab_start_, 0);
      });
    for (int u : embedding) give_grads(u);
    ready(0);
  }
  overwrite_grads_ = false;
}

template <typename T>
void Model<T>::mlp_backward(LayerActs& a, int l, int B, int Tlen, Buf<T> dln_rows, T dloss,
                            const double* pooled) {
  const auto [N, C, Fmax, hs, NH, NKV, QKV, A, FCmax, NC] = dims(B, Tlen);
  const int F = mlp_width(l), FC = config_.arch == Arch::Llama ? 2 * F : F;  // this layer's
  const size_t NF = static_cast<size_t>(N) * F;
  const int Ns = seq_rows(N);
  const size_t NsC = static_cast<size_t>(Ns) * C;
  GradActs& d = grad_;
  if (F > 0) {
    // the gradient of the MLP's output: dres, or (an MoE layer's gated shared experts) dres times
    // each row's gate, in dln until the last product below writes dln
    const bool gated = config_.moe_shared_gate && config_.is_moe_layer(l);
    if (gated) moe_->shared_gate_backward(a.moe, d.dres, d.dln, Ns);
    backend_.matmul_backward(d.dfch_act, g(Slot::FcProjW, l), maybe_g(Slot::FcProjB, l),
                             gather_rows(gated ? d.dln : d.dres, NsC), a.fch_act,
                             p(Slot::FcProjW, l), N, F, C, grad_write(Slot::FcProjW));
    lp(d.dfch_act, NF);
    if (config_.arch == Arch::Llama)
      backend_.swiglu_backward(d.dfch, a.fch, d.dfch_act, N, F);
    else
      backend_.gelu_backward(d.dfch, a.fch, d.dfch_act, NF);
    lp(d.dfch, static_cast<size_t>(N) * FC);
    backend_.matmul_backward(d.dln, g(Slot::FcW, l), maybe_g(Slot::FcB, l), d.dfch,
                             gather_rows(a.ln2, NsC), p(Slot::FcW, l), N, C, FC,
                             grad_write(Slot::FcW));
    sum_rows(d.dln, dln_rows, NsC);
    lp(dln_rows, NsC);
  }
  if (config_.is_moe_layer(l))  // dln_rows (+)= the routed experts' and the router's gradient
    moe_->backward(
        a.moe, dln_rows, F > 0, d.dres, a.ln2, p(Slot::RouterW, l), maybe_p(Slot::SharedGateW, l),
        p(Slot::ExpertFcW, l), p(Slot::ExpertProjW, l), g(Slot::RouterW, l),
        maybe_g(Slot::SharedGateW, l), g(Slot::ExpertFcW, l), g(Slot::ExpertProjW, l), Ns, dloss,
        pooled, pooled ? &moe_stats_[config_.moe_layers(layout_.shard().layer_begin, l)] : nullptr);
}

template <typename T>
void Model<T>::sync_replicated_grads(T* grads, const ShardRanges& held) {
  if (!tp_) return;
  const T inv = T(1) / static_cast<T>(tp_->size());
  for (const ParamTensor& t : layout_.tensors()) {
    if (!t.tp_replicated()) continue;
    const ShardRanges::Overlap o = held.overlap(t.offset, t.offset + t.numel);
    if (o.size() == 0) continue;  // the same on every tp rank
    tp_->all_reduce(grads + o.at, o.size(), ReduceOp::Sum);
    if (!tp_partial_grad(t.slot)) backend_.scale(grads + o.at, inv, o.size());
  }
}

// One backend call over the held part of every primary tensor: the tensors' sums added in order.
// The list is refilled in place: no allocation after the first step.
template <typename T>
double Model<T>::grad_square_sum(const T* grads, const ShardRanges& held, bool dense,
                                 bool experts) const {
  norm_segments_.clear();
  for (const ParamTensor& t : layout_.tensors()) {
    const ShardRanges::Overlap o = held.overlap(t.offset, t.offset + t.numel);
    if (t.primary && o.size() > 0 && (t.ep_split ? experts : dense))
      norm_segments_.push_back({o.at, o.size()});
  }
  return backend_.sum_squares(grads, norm_segments_);
}

template class Model<float>;
template class Model<double>;

}  // namespace mpitrain
