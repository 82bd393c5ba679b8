#include "mpitrain/model/moe.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "mpitrain/runtime/error.hpp"

namespace mpitrain {

namespace {

// MPITRAIN_MOE_STAGED=1: the host code takes a device's way on the CPU, every backend tensor
// through download / upload into its host buffers (tests: the device path's logic).
bool staged_like_a_device() {
  const char* v = std::getenv("MPITRAIN_MOE_STAGED");
  return v != nullptr && std::string(v) == "1";
}

// The host loops run on OpenMP's threads from this much work (elements) on, each over rows (or
// experts) whose results no other thread writes, every element summed in the serial order: the
// same bits at any thread count.
constexpr size_t kParallelWork = size_t{1} << 14;

// What Megatron-Core adds to a sum of sigmoid scores it divides by: a row of zeros gives 0.
constexpr double kSigmoidSumFloor = 1e-20;

// The K of E experts with the largest key(e), into chosen: repeatedly the largest not yet
// chosen, scanning the experts in index order with a strict >, so that of equal keys the lower
// index wins.
template <typename Key>
void top_k(int E, int K, const Key& key, int32_t* chosen) {
  for (int k = 0; k < K; ++k) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (std::find(chosen, chosen + k, e) != chosen + k) continue;
      if (best < 0 || key(e) > key(best)) best = e;
    }
    chosen[k] = best;
  }
}

}  // namespace

void update_expert_bias(float* bias, const std::vector<int64_t>& tokens, float rate) {
  const size_t E = tokens.size();
  double total = 0;  // exact: counts far below 2^53
  for (int64_t t : tokens) total += static_cast<double>(t);
  for (size_t e = 0; e < E; ++e) {  // sign(mean - t) compared as E t against the total
    const double t = static_cast<double>(tokens[e]) * static_cast<double>(E);
    if (t < total) bias[e] += rate;
    if (t > total) bias[e] -= rate;
  }
}

MoeAuxLoss parse_moe_aux_loss(const std::string& name) {
  if (name == "per-layer") return MoeAuxLoss::PerLayer;
  if (name == "all-layers") return MoeAuxLoss::AllLayers;
  throw UsageError("moe-aux-loss-form must be auto, per-layer or all-layers, not '" + name + "'");
}

template <typename T>
MoeLayer<T>::MoeLayer(Backend<T>& backend, int n_experts, int top_k, MoeRouting routing,
                      int d_model, int expert_width, int R_max, float aux_coef, float z_coef,
                      MoeAuxLoss aux_form, Precision emulate, Communicator* stats_group)
    : backend_(backend),
      host_memory_(backend.host_memory() && !staged_like_a_device()),
      E_(n_experts),
      K_(top_k),
      C_(d_model),
      Fe_(expert_width),
      R_max_(R_max),
      routing_(routing),
      aux_coef_(static_cast<T>(aux_coef)),
      z_coef_(static_cast<T>(z_coef)),
      aux_form_(aux_form),
      emulate_(emulate),
      stats_group_(stats_group),
      sums_(3 * static_cast<size_t>(n_experts) + 2),
      next_(n_experts),
      aux_weights_(n_experts),
      group_worth_(routing.groups > 1 ? static_cast<size_t>(R_max) * routing.groups : 0),
      group_chosen_(routing.groups > 1 ? static_cast<size_t>(R_max) * routing.group_topk : 0),
      wgh_(routing.shared_gate ? d_model : 0),
      dwgh_(routing.shared_gate ? d_model : 0) {}

template <typename T>
size_t MoeLayer<T>::kept_acts(size_t R, int K, int C, int Fe) {
  return R * K * (2 * static_cast<size_t>(C) + 3 * static_cast<size_t>(Fe));  // xs, y, h, a
}

template <typename T>
size_t MoeLayer<T>::kept_stats(size_t R, int E, int K, int C, bool shared_gate) {
  // logits, probs, lse, gates; prob_sums; the shared experts' gate and output
  return R * (2 * static_cast<size_t>(E) + 1 + K) + E + (shared_gate ? R * (C + 1) : 0);
}

template <typename T>
size_t MoeLayer<T>::kept_ids(size_t R, int E, int K) {
  return 2 * R * K + 2 * (static_cast<size_t>(E) + 1);  // experts, slot_of, offsets, counts
}

template <typename T>
size_t MoeLayer<T>::scratch_acts(size_t R, int K, int C, int Fe) {
  return R * K * (static_cast<size_t>(C) + 3 * static_cast<size_t>(Fe));  // dy, da, dh
}

template <typename T>
size_t MoeLayer<T>::scratch_stats(size_t R, int E, int K, int C) {
  // xh, oh, dxh, yh, wh, dz, dg, dwh
  return 3 * R * C + R * K * C + 2 * static_cast<size_t>(E) * C + R * E + R * K;
}

template <typename T>
void MoeLayer<T>::carve(MoeActs<T>& a, Buf<T>& acts, T*& stats, int32_t*& ids) const {
  const size_t R = R_max_, RK = R * K_;
  auto take = [&](size_t n) { Buf<T> b = acts; acts = acts + n; return b; };
  auto take_stats = [&](size_t n) { T* p = stats; stats += n; return p; };
  auto take_ids = [&](size_t n) { int32_t* p = ids; ids += n; return p; };
  a.logits = take_stats(R * E_); a.probs = take_stats(R * E_); a.lse = take_stats(R);
  a.gates = take_stats(R * K_);
  a.prob_sums = take_stats(E_);
  if (routing_.shared_gate) {
    a.shared_gate = take_stats(R);
    a.shared_y = take_stats(R * C_);
  }
  a.experts = take_ids(RK); a.slot_of = take_ids(RK);
  a.offsets = take_ids(E_ + 1); a.counts = take_ids(E_ + 1);
  a.xs = take(RK * C_); a.h = take(RK * 2 * Fe_); a.a = take(RK * Fe_); a.y = take(RK * C_);
}

template <typename T>
void MoeLayer<T>::set_scratch(Buf<T> acts, T* stats) {
  const size_t R = R_max_, RK = R * K_;
  dy_ = acts; da_ = dy_ + RK * C_; dh_ = da_ + RK * Fe_;
  xh_ = stats; oh_ = xh_ + R * C_; dxh_ = oh_ + R * C_; yh_ = dxh_ + R * C_;
  wh_ = yh_ + RK * C_; dz_ = wh_ + static_cast<size_t>(E_) * C_; dg_ = dz_ + R * E_;
  dwh_ = dg_ + RK;
}

template <typename T>
const T* MoeLayer<T>::host(CBuf<T> x, size_t n, T* scratch) {
  if (host_memory_ && x.full()) return x.full();
  backend_.download(scratch, x, n);
  return scratch;
}

template <typename T>
T* MoeLayer<T>::host_target(Buf<T> x, T* scratch) const {
  return host_memory_ && x.full() ? x.full() : scratch;
}

template <typename T>
void MoeLayer<T>::round(Buf<T> x, size_t n) {
  if (emulate_ != Precision::Fp32 && x.full()) backend_.round_to(x.full(), n, emulate_);
}

template <typename T>
void MoeLayer<T>::store(Buf<T> dst, const T* src, size_t n) {
  if (src != host_target(dst, nullptr))
    backend_.upload(dst, src, n);  // 2-byte storage: rounded by the conversion
  round(dst, n);
}

// The scores in T, softmax over the row or sigmoid per expert (lse either way), then each row's
// top K of the score plus the expert bias where there is one, with groups among the experts of
// the row's best groups only. The gates: scale x the chosen scores renormalised to sum 1
// (norm_topk), or as they are.
template <typename T>
void MoeLayer<T>::route(MoeActs<T>& a, const float* bias, int R) {
  const int G = routing_.groups, M = routing_.group_topk, Eg = E_ / G;
#pragma omp parallel for schedule(static) if (static_cast<size_t>(R) * E_ > kParallelWork)
  for (int r = 0; r < R; ++r) {
    const T* z = a.logits + static_cast<size_t>(r) * E_;
    T* p = a.probs + static_cast<size_t>(r) * E_;
    const T zmax = *std::max_element(z, z + E_);
    T sum = 0;
    for (int e = 0; e < E_; ++e) sum += p[e] = std::exp(z[e] - zmax);
    a.lse[r] = zmax + std::log(sum);
    if (routing_.sigmoid)
      for (int e = 0; e < E_; ++e) p[e] = 1 / (1 + std::exp(-z[e]));
    else
      for (int e = 0; e < E_; ++e) p[e] /= sum;
    const auto key = [&](int e) { return bias ? p[e] + static_cast<T>(bias[e]) : p[e]; };
    int32_t* chosen = a.experts + static_cast<size_t>(r) * K_;
    if (G == 1) {
      top_k(E_, K_, key, chosen);
    } else {  // a group's worth: the sum of its top K/M keys (chosen: scratch until the choice)
      T* worth = group_worth_.data() + static_cast<size_t>(r) * G;
      int32_t* groups = group_chosen_.data() + static_cast<size_t>(r) * M;
      for (int g = 0; g < G; ++g) {
        const auto in_group = [&](int i) { return key(g * Eg + i); };
        top_k(Eg, K_ / M, in_group, chosen);
        worth[g] = 0;
        for (int i = 0; i < K_ / M; ++i) worth[g] += in_group(chosen[i]);
      }
      const auto group_worth = [&](int g) { return worth[g]; };
      top_k(G, M, group_worth, groups);
      const auto limited = [&](int e) {
        return std::find(groups, groups + M, e / Eg) != groups + M
                   ? key(e)
                   : -std::numeric_limits<T>::infinity();
      };
      top_k(E_, K_, limited, chosen);
    }
    T chosen_sum = routing_.sigmoid ? static_cast<T>(kSigmoidSumFloor) : T{0};
    for (int k = 0; k < K_; ++k) chosen_sum += p[chosen[k]];
    const T scale = static_cast<T>(routing_.scale) / (routing_.norm_topk ? chosen_sum : T{1});
    for (int k = 0; k < K_; ++k) a.gates[static_cast<size_t>(r) * K_ + k] = p[chosen[k]] * scale;
  }
}

template <typename T>
void MoeLayer<T>::forward(MoeActs<T>& a, Buf<T> out, bool add, CBuf<T> x, CBuf<T> wr, CBuf<T> wg,
                          CBuf<T> w1, CBuf<T> w2, const float* expert_bias, int R,
                          MoeLayerStats* stats) {
  if (R > R_max_) MPITRAIN_THROW("mixture of experts: more rows than sized for");
  if (routing_.shared_gate != (add && wg))
    MPITRAIN_THROW("mixture of experts: the shared experts' gate without them or its weight");
  const size_t C = C_, RK = static_cast<size_t>(R) * K_, RC = static_cast<size_t>(R) * C;
  // router: z (R,E) = x Wr^T, in T
  const T* xh = host(x, RC, xh_);
  const T* wh = host(wr, static_cast<size_t>(E_) * C, wh_);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(R) * E_ * C > kParallelWork)
  for (int r = 0; r < R; ++r)
    for (int e = 0; e < E_; ++e) {
      T s = 0;
      for (size_t c = 0; c < C; ++c) s += xh[r * C + c] * wh[e * C + c];
      a.logits[static_cast<size_t>(r) * E_ + e] = s;
    }
  if (routing_.shared_gate) {  // the shared experts' gate: sigmoid(x wg) (R)
    const T* w = host(wg, C, wgh_.data());
    for (int r = 0; r < R; ++r) {
      T s = 0;
      for (size_t c = 0; c < C; ++c) s += xh[r * C + c] * w[c];
      a.shared_gate[r] = 1 / (1 + std::exp(-s));
    }
  }
  route(a, expert_bias, R);
  // dispatch: a counting sort of the assignments by expert, stable (by row, then k)
  std::fill(a.offsets, a.offsets + E_ + 1, 0);
  for (size_t i = 0; i < RK; ++i) ++a.offsets[a.experts[i] + 1];
  for (int e = 0; e < E_; ++e) a.offsets[e + 1] += a.offsets[e];
  next_.assign(a.offsets, a.offsets + E_);  // each expert's next free slot
  for (size_t i = 0; i < RK; ++i) a.slot_of[i] = next_[a.experts[i]]++;
  T* xsh = host_target(a.xs, yh_);  // (RK,C); exact in any storage: x's values as stored
#pragma omp parallel for schedule(static) if (RK * C > kParallelWork)
  for (size_t i = 0; i < RK; ++i)  // xs[slot] = x[row]
    std::copy(xh + (i / K_) * C, xh + (i / K_ + 1) * C, xsh + a.slot_of[i] * C);
  store(a.xs, xsh, RK * C);
  // experts: here, or (expert parallelism) at their owners: the rows go there, come back as y
  if (!dispatch_) {
    experts_forward(a.offsets, E_, a.xs, a.h, a.a, a.y, w1, w2);
  } else {
    const size_t row = C * a.xs.element_size();
    plan_dispatch(a.offsets);
    dispatch_->to_owners(a.xs.data(), ep_xs_.data(), row);
    experts_forward(local_offsets_.data(), dispatch_->local_experts(), ep_xs_, ep_h_, ep_a_, ep_y_,
                    w1, w2);
    dispatch_->from_owners(ep_y_.data(), a.y.data(), row);
  }
  // combine: out[r] (+)= sum_k g[r,k] y[slot(r,k)]; with the shared experts' gate their output
  // (out's, kept) times it first
  const T* yh = host(a.y, RK * C, yh_);
  const T* prior = add ? host(out, RC, oh_) : nullptr;
  if (routing_.shared_gate) std::copy(prior, prior + RC, a.shared_y);
#pragma omp parallel for schedule(static) if (RK * C > kParallelWork)
  for (int r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) {
      T s = prior ? prior[r * C + c] : T(0);
      if (routing_.shared_gate) s *= a.shared_gate[r];
      for (int k = 0; k < K_; ++k) {
        const size_t i = static_cast<size_t>(r) * K_ + k;
        s += a.gates[i] * yh[a.slot_of[i] * C + c];
      }
      dxh_[r * C + c] = s;
    }
  store(out, dxh_, RC);
  // statistics: counts, sums of p, sum of lse^2, rows and, with an expert bias or groups, the
  // counts of the scores' own top k, which the aux loss takes (the header); over all tp ranks'
  // rows under sp, then all cp ranks': the whole micro-batch
  const bool apart = aux_counts_apart(expert_bias);
  const size_t n_sums = apart ? 3 * static_cast<size_t>(E_) + 2 : 2 * static_cast<size_t>(E_) + 2;
  std::fill(sums_.begin(), sums_.end(), 0.0);
  for (int e = 0; e < E_; ++e) sums_[e] = a.offsets[e + 1] - a.offsets[e];
  double* own = sums_.data() + 2 * E_ + 2;  // the scores' own top k's counts
  for (int r = 0; apart && r < R; ++r) {
    const T* p = a.probs + static_cast<size_t>(r) * E_;
    const auto score = [&](int e) { return p[e]; };
    top_k(E_, K_, score, next_.data());  // next_ (E >= K) is free again: the dispatch is done
    for (int k = 0; k < K_; ++k) ++own[next_[k]];
  }
  for (int r = 0; r < R; ++r) {
    const T* p = a.probs + static_cast<size_t>(r) * E_;
    const T norm =
        routing_.sigmoid ? std::accumulate(p, p + E_, static_cast<T>(kSigmoidSumFloor)) : T{1};
    for (int e = 0; e < E_; ++e) sums_[E_ + e] += routing_.sigmoid ? p[e] / norm : p[e];
    sums_[2 * E_] += static_cast<double>(a.lse[r]) * a.lse[r];
  }
  sums_[2 * E_ + 1] = R;
  if (stats_group_) stats_group_->all_reduce(sums_.data(), n_sums, ReduceOp::Sum);
  if (cp_) cp_->all_reduce(sums_.data(), n_sums, ReduceOp::Sum);
  const double rows = sums_[2 * E_ + 1];  // exact: integers far below 2^53
  const double* aux_counts = apart ? own : sums_.data();
  for (int e = 0; e < E_; ++e) a.counts[e] = static_cast<int32_t>(aux_counts[e]);
  a.counts[E_] = static_cast<int32_t>(rows);
  for (int e = 0; e < E_; ++e) a.prob_sums[e] = static_cast<T>(sums_[E_ + e]);
  if (!stats) return;
  if (aux_form_ == MoeAuxLoss::PerLayer) {
    double aux = 0;
    for (int e = 0; e < E_; ++e) aux += aux_counts[e] / rows * (sums_[E_ + e] / rows);
    stats->aux_loss += E_ * aux;
  }
  stats->z_loss += sums_[2 * E_] / rows;
  stats->tokens_per_expert.resize(E_);
  for (int e = 0; e < E_; ++e) stats->tokens_per_expert[e] += static_cast<int64_t>(sums_[e]);
  stats->rows += static_cast<int64_t>(rows);
}

template <typename T>
void MoeLayer<T>::shared_gate_backward(const MoeActs<T>& a, CBuf<T> dout, Buf<T> dshared, int R) {
  const size_t C = C_, RC = static_cast<size_t>(R) * C;
  const T* doh = host(dout, RC, oh_);
  T* d = host_target(dshared, dxh_);
  for (size_t i = 0; i < RC; ++i) d[i] = a.shared_gate[i / C] * doh[i];
  store(dshared, d, RC);
}

template <typename T>
void MoeLayer<T>::backward(const MoeActs<T>& a, Buf<T> dx, bool add, CBuf<T> dout, CBuf<T> x,
                           CBuf<T> wr, CBuf<T> wg, CBuf<T> w1, CBuf<T> w2, T* dwr, T* dwg, T* dw1,
                           T* dw2, int R, T dloss, const double* pooled, MoeLayerStats* stats) {
  if ((aux_form_ == MoeAuxLoss::AllLayers) != (pooled != nullptr))
    MPITRAIN_THROW("mixture of experts: the all-layers aux loss's weights missing or unexpected");
  const size_t C = C_, RK = static_cast<size_t>(R) * K_, RC = static_cast<size_t>(R) * C;
  // combine: dg[r,k] = dout[r] . y[slot], dy[slot] = g[r,k] dout[r]   (RK,C)
  const T* doh = host(dout, RC, oh_);
  const T* yh = host(a.y, RK * C, yh_);
#pragma omp parallel for schedule(static) if (RK * C > kParallelWork)
  for (size_t i = 0; i < RK; ++i) {
    const T* d = doh + (i / K_) * C;
    const T* y = yh + a.slot_of[i] * C;
    T s = 0;
    for (size_t c = 0; c < C; ++c) s += d[c] * y[c];
    dg_[i] = s;
  }
  T* dyh = yh_;  // y is read: its scratch takes dy
#pragma omp parallel for schedule(static) if (RK * C > kParallelWork)
  for (size_t i = 0; i < RK; ++i) {
    const T* d = doh + (i / K_) * C;
    T* dy = dyh + a.slot_of[i] * C;
    for (size_t c = 0; c < C; ++c) dy[c] = a.gates[i] * d[c];
  }
  store(dy_, dyh, RK * C);
  // experts backward: here, or at their owners (the gradients of y go there, the gradients of
  // xs come back; the owners recompute h and a from the rows sent again)
  if (!dispatch_) {
    experts_backward(a.offsets, E_, dy_, da_, dh_, a.xs, a.h, a.a, w1, w2, dw1, dw2);
  } else {
    const size_t row = C * a.xs.element_size();
    const int El = dispatch_->local_experts();
    plan_dispatch(a.offsets);
    dispatch_->to_owners(a.xs.data(), ep_xs_.data(), row);
    dispatch_->to_owners(dy_.data(), ep_y_.data(), row);
    experts_forward(local_offsets_.data(), El, ep_xs_, ep_h_, ep_a_, nullptr, w1, w2);
    experts_backward(local_offsets_.data(), El, ep_y_, ep_da_, ep_dh_, ep_xs_, ep_h_, ep_a_, w1,
                     w2, dw1, dw2);
    dispatch_->from_owners(ep_y_.data(), dy_.data(), row);
  }
  // dx[r] = sum_k dxs[slot(r,k)]   (R,C)
  const T* dxs = host(dy_, RK * C, yh_);
#pragma omp parallel for schedule(static) if (RK * C > kParallelWork)
  for (int r = 0; r < R; ++r)
    for (size_t c = 0; c < C; ++c) {
      T s = 0;
      for (int k = 0; k < K_; ++k) s += dxs[a.slot_of[static_cast<size_t>(r) * K_ + k] * C + c];
      dxh_[r * C + c] = s;
    }
  // gates -> scores: g_k = c s_k / S over the chosen, ds_j = (c dg_j - sum_k g_k dg_k) / S
  // (without norm_topk g_k = c s_k: ds_j = c dg_j); the aux loss adds a_e = aux_coef dloss E
  // w[e] / R_all to each of P's scores (w: counts, or AllLayers' pooled): to p[r,e] itself, or
  // through q = s / D (D the row's sum) (a_j - sum_e q_e a_e) / D to s_j. Then softmax:
  // dz = p (dp - p.dp), or sigmoid: dz = ds s (1 - s); the z-loss adds z_coef dloss 2 lse
  // softmax(z) (R x dloss times d/dz of aux_coef aux + z_coef z).
  const T R_all = static_cast<T>(a.counts[E_]);
  for (int e = 0; e < E_; ++e)
    aux_weights_[e] = pooled ? static_cast<T>(pooled[e]) : static_cast<T>(a.counts[e]);
  if (pooled && stats) {  // this layer's share E sum_e w_e S_e / R_all^2 (the header)
    double share = 0;
    for (int e = 0; e < E_; ++e) share += pooled[e] * a.prob_sums[e];
    stats->aux_loss += E_ * share / (static_cast<double>(R_all) * R_all);
  }
  const bool sigmoid = routing_.sigmoid;
  const T scale = static_cast<T>(routing_.scale), floor = static_cast<T>(kSigmoidSumFloor);
#pragma omp parallel for schedule(static) if (static_cast<size_t>(R) * E_ > kParallelWork)
  for (int r = 0; r < R; ++r) {
    const T* p = a.probs + static_cast<size_t>(r) * E_;
    const T* g = a.gates + static_cast<size_t>(r) * K_;
    const T* dg = dg_ + static_cast<size_t>(r) * K_;
    const int32_t* chosen = a.experts + static_cast<size_t>(r) * K_;
    T* dz = dz_ + static_cast<size_t>(r) * E_;
    T S = sigmoid ? floor : T{0}, gdg = 0;
    for (int k = 0; k < K_; ++k) {
      S += p[chosen[k]];
      gdg += g[k] * dg[k];
    }
    for (int e = 0; e < E_; ++e) dz[e] = aux_coef_ * dloss * E_ * aux_weights_[e] / R_all;  // dp
    if (sigmoid) {  // through q = s / D
      const T D = std::accumulate(p, p + E_, floor);
      T qa = 0;
      for (int e = 0; e < E_; ++e) qa += p[e] / D * dz[e];
      for (int e = 0; e < E_; ++e) dz[e] = (dz[e] - qa) / D;
    }
    for (int k = 0; k < K_; ++k)
      dz[chosen[k]] += routing_.norm_topk ? (scale * dg[k] - gdg) / S : scale * dg[k];
    const T* z = a.logits + static_cast<size_t>(r) * E_;
    if (sigmoid) {
      for (int e = 0; e < E_; ++e)
        dz[e] =
            dz[e] * p[e] * (1 - p[e]) + z_coef_ * dloss * 2 * a.lse[r] * std::exp(z[e] - a.lse[r]);
    } else {
      T pdp = 0;
      for (int e = 0; e < E_; ++e) pdp += p[e] * dz[e];
      for (int e = 0; e < E_; ++e)
        dz[e] = p[e] * (dz[e] - pdp) + z_coef_ * dloss * 2 * a.lse[r] * p[e];
    }
  }
  // router: dx += dz Wr (R,C), each row over e in order; dWr += dz^T x (E,C), each element
  // over r in order (threads take experts and column blocks)
  const size_t EC = static_cast<size_t>(E_) * C, work = RC * E_;
  const T* xh = host(x, RC, xh_);
  const T* wh = host(wr, EC, wh_);
#pragma omp parallel for schedule(static) if (work > kParallelWork)
  for (int r = 0; r < R; ++r)
    for (int e = 0; e < E_; ++e) {
      const T d = dz_[static_cast<size_t>(r) * E_ + e];
      for (size_t c = 0; c < C; ++c) dxh_[r * C + c] += d * wh[e * C + c];
    }
  T* dwh = host_memory_ ? dwr : dwh_;
  if (dwh != dwr) backend_.download(dwh, dwr, EC);
  constexpr size_t kColumns = 64;
  const size_t blocks = (C + kColumns - 1) / kColumns;
#pragma omp parallel for collapse(2) schedule(static) if (work > kParallelWork)
  for (int e = 0; e < E_; ++e)
    for (size_t b = 0; b < blocks; ++b)
      for (int r = 0; r < R; ++r) {
        const T d = dz_[static_cast<size_t>(r) * E_ + e];
        for (size_t c = b * kColumns; c < std::min(C, (b + 1) * kColumns); ++c)
          dwh[e * C + c] += d * xh[r * C + c];
      }
  if (dwh != dwr) backend_.upload(dwr, dwh, EC);
  if (routing_.shared_gate) {  // t = sigmoid(x wg): dzt = t (1 - t) dout . shared_y; dx += dzt wg,
    const T* w = host(wg, C, wgh_.data());  // dwg += dzt^T x
    T* dwgh = host_memory_ ? dwg : dwgh_.data();
    if (dwgh != dwg) backend_.download(dwgh, dwg, C);
    for (int r = 0; r < R; ++r) {
      const T t = a.shared_gate[r];
      T s = 0;
      for (size_t c = 0; c < C; ++c) s += doh[r * C + c] * a.shared_y[r * C + c];
      const T dz = t * (1 - t) * s;
      for (size_t c = 0; c < C; ++c) {
        dxh_[r * C + c] += dz * w[c];
        dwgh[c] += dz * xh[r * C + c];
      }
    }
    if (dwgh != dwg) backend_.upload(dwg, dwgh, C);
  }
  if (add) {
    const T* prior = host(dx, RC, oh_);
    for (size_t i = 0; i < RC; ++i) dxh_[i] += prior[i];
  }
  store(dx, dxh_, RC);
}

// h = xs We1^T, a = swiglu(h), then (unless y is null) y = a We2^T: one matmul per expert over
// its rows [offsets[e], offsets[e+1]), w1 / w2 holding these n experts.
template <typename T>
void MoeLayer<T>::experts_forward(const int32_t* offsets, int n, CBuf<T> xs, Buf<T> h,
                                  Buf<T> act, Buf<T> y, CBuf<T> w1, CBuf<T> w2) {
  const size_t C = C_, Fe = Fe_, rows = offsets[n];
  for (int e = 0; e < n; ++e) {
    const size_t o = offsets[e];
    const int m = offsets[e + 1] - offsets[e];
    if (m > 0)
      backend_.matmul_forward(h + o * 2 * Fe, xs + o * C, w1 + e * 2 * Fe * C, nullptr, m, C_,
                              2 * Fe_);
  }
  round(h, rows * 2 * Fe);
  backend_.swiglu_forward(act, h, static_cast<int>(rows), Fe_);
  round(act, rows * Fe);
  if (!y) return;
  for (int e = 0; e < n; ++e) {
    const size_t o = offsets[e];
    const int m = offsets[e + 1] - offsets[e];
    if (m > 0)
      backend_.matmul_forward(y + o * C, act + o * Fe, w2 + e * C * Fe, nullptr, m, Fe_, C_);
  }
  round(y, rows * C);
}

// Per expert: da = dy We2, dWe2 += dy^T a; dh = swiglu'(h) da; dxs = dh We1, dWe1 += dh^T xs;
// dxs replaces dy.
template <typename T>
void MoeLayer<T>::experts_backward(const int32_t* offsets, int n, Buf<T> dy, Buf<T> da,
                                   Buf<T> dh, CBuf<T> xs, CBuf<T> h, CBuf<T> act, CBuf<T> w1,
                                   CBuf<T> w2, T* dw1, T* dw2) {
  const size_t C = C_, Fe = Fe_, rows = offsets[n];
  // Added, never written over: an expert without rows has no product (Model::zero_grads zeroes
  // the experts' gradients).
  for (int e = 0; e < n; ++e) {
    const size_t o = offsets[e];
    const int m = offsets[e + 1] - offsets[e];
    if (m > 0)
      backend_.matmul_backward(da + o * Fe, dw2 + e * C * Fe, nullptr, dy + o * C, act + o * Fe,
                               w2 + e * C * Fe, m, Fe_, C_, GradWrite::Add);
  }
  round(da, rows * Fe);
  backend_.swiglu_backward(dh, h, da, static_cast<int>(rows), Fe_);
  round(dh, rows * 2 * Fe);
  for (int e = 0; e < n; ++e) {
    const size_t o = offsets[e];
    const int m = offsets[e + 1] - offsets[e];
    if (m > 0)
      backend_.matmul_backward(dy + o * C, dw1 + e * 2 * Fe * C, nullptr, dh + o * 2 * Fe,
                               xs + o * C, w1 + e * 2 * Fe * C, m, C_, 2 * Fe_, GradWrite::Add);
  }
  round(dy, rows * C);
}

template <typename T>
void MoeLayer<T>::set_statistics_groups(Communicator* tp, Communicator* cp) {
  stats_group_ = tp;
  cp_ = cp && cp->size() > 1 ? cp : nullptr;
}

template <typename T>
void MoeLayer<T>::set_expert_parallel(Communicator* ep, Communicator* ep_data) {
  dispatch_.reset();
  ep_buffers_.reset();
  if (!ep || ep->size() == 1) return;
  // The most rows a rank can receive: every rank's R_max x K rows for its experts.
  const size_t cap = static_cast<size_t>(ep->size()) * R_max_ * K_, C = C_, Fe = Fe_;
  const Precision dtype = dy_.dtype();
  Buf<T> b = backend_.alloc(cap * (3 * C + 6 * Fe), dtype);
  ep_buffers_ = std::unique_ptr<void, std::function<void(void*)>>(
      b.data(), [backend = &backend_](void* p) { backend->free(p); });
  ep_xs_ = b; ep_y_ = ep_xs_ + cap * C; ep_h_ = ep_y_ + cap * C; ep_a_ = ep_h_ + cap * 2 * Fe;
  ep_dh_ = ep_a_ + cap * Fe; ep_da_ = ep_dh_ + cap * 2 * Fe;
  // The rows move in backend memory: over ep_data, staged in the allocation's last (cap,C),
  // regrouped by the backend's copies (whole rows: bytes a multiple of the element size).
  const size_t element = dy_.element_size();
  RowMemory rows{ep_data ? ep_data : ep, (ep_da_ + cap * Fe).data(),
                 [backend = &backend_, dtype, element](void* dst, const void* src, size_t bytes) {
                   backend->copy(Buf<T>(dst, dtype), CBuf<T>(src, dtype), bytes / element);
                 }};
  dispatch_ = std::make_unique<ExpertDispatch>(*ep, E_, cap * C * element, std::move(rows));
  counts_.resize(E_);
  local_offsets_.resize(dispatch_->local_experts() + 1);
}

// The counts of the sorted rows exchanged with the owners, and this rank's experts' offsets
// into what they receive.
template <typename T>
void MoeLayer<T>::plan_dispatch(const int32_t* offsets) {
  for (int e = 0; e < E_; ++e) counts_[e] = offsets[e + 1] - offsets[e];
  dispatch_->plan(counts_.data());
  const std::vector<int64_t>& local = dispatch_->local_counts();
  local_offsets_[0] = 0;
  for (size_t j = 0; j < local.size(); ++j)
    local_offsets_[j + 1] = local_offsets_[j] + static_cast<int32_t>(local[j]);
}

template class MoeLayer<float>;
template class MoeLayer<double>;

}  // namespace mpitrain
