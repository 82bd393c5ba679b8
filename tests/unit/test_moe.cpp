// Mixture of experts (model/moe.hpp, /work/MOE_DESIGN.md): one expert of top-1 is the dense
// llama model bit for bit; the routing, dispatch, combine and load statistics against a naive
// reference written here; the backward (router, experts, shared experts, the layer's input,
// aux and z losses) against central finite differences in double; the tie rule; recomputation
// and 2-byte storage keep their bits, bf16 stays near fp32.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <vector>

#include "cpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/model/moe.hpp"
#include "mpitrain/runtime/rng.hpp"
#include "small_llama.hpp"

using namespace mpitrain;

namespace {

ModelConfig llama(int d_ff) { return test_models::small_llama(16, d_ff, 20, 6); }

// E = 4, K = 2 experts of width 8; shared: one shared expert; every: MoE in every n-th layer.
ModelConfig moe(int shared, int every) {
  ModelConfig c = llama(24);
  c.n_experts = 4;
  c.top_k = 2;
  c.moe_ff = 8;
  c.n_shared_experts = shared;
  c.moe_every = every;
  return c;
}

// moe(1, 1) with the shared expert's output gated per token (qwen2_moe's shared_expert_gate).
ModelConfig gated_shared() {
  ModelConfig c = moe(1, 1);
  c.moe_shared_gate = true;
  return c;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
void fill_tokens(int n, int vocab, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
  Rng rng(13, 0);
  tokens.resize(n);
  targets.resize(n);
  for (int i = 0; i < n; ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(vocab));
    targets[i] = static_cast<int32_t>(rng.below(vocab));
  }
}

// Every parameter moved off its initial value by N(0, scale), so norm weights and the router
// have generic values (real vocabulary rows only). T = the model's scalar.
template <typename T>
void perturb(Model<T>& model, double scale, uint64_t seed) {
  Rng rng(seed, 0);
  const ModelConfig& cfg = model.config();
  std::vector<T> host(model.num_params());
  model.backend().download(host.data(), model.params(), host.size());
  for (const ParamTensor& t : model.layout().tensors()) {
    const bool vocab_table = t.slot == Slot::Wte || t.slot == Slot::LmHead;
    const size_t real = vocab_table ? static_cast<size_t>(cfg.vocab_size) * cfg.d_model : t.numel;
    for (size_t j = 0; j < real; ++j) host[t.offset + j] += static_cast<T>(scale * rng.normal());
  }
  model.backend().upload(model.params(), host.data(), host.size());
}

}  // namespace

// E = 1, K = 1, no shared expert: gate 1, the one expert's GEMMs on the same rows in the same
// order as the dense MLP's, so loss and every gradient are the dense model's bit for bit (the
// router's gradient is exactly 0: p = 1). Two micro-batches, so accumulation is covered.
TEST(Moe, OneExpertTopOneIsTheDenseModel) {
  const ModelConfig dense = llama(24);
  ModelConfig one = dense;
  one.n_experts = 1;
  one.top_k = 1;  // moe_ff 0: the expert is d_ff wide
  CpuBackend<float> backend(1);
  const int B = 2, T = 6;
  Model<float> d(dense, backend, {}, B, T), m(one, backend, {}, B, T);
  d.init(3);
  perturb(d, 0.05, 4);
  m.init(5);  // then every shared tensor from d; mlp.fc / mlp.proj into the expert
  for (const ParamTensor& t : m.layout().tensors()) {
    Slot from = t.slot;
    if (t.slot == Slot::RouterW) continue;
    if (t.slot == Slot::ExpertFcW) from = Slot::FcW;
    if (t.slot == Slot::ExpertProjW) from = Slot::FcProjW;
    const size_t at = d.layout().offset(from, t.layer);
    std::copy_n(d.params().full() + at, t.numel, m.params().full() + t.offset);
  }
  std::vector<int32_t> tokens, targets;
  fill_tokens<float>(2 * B * T, dense.vocab_size, tokens, targets);
  d.zero_grads();
  m.zero_grads();
  for (int mb = 0; mb < 2; ++mb) {
    const int32_t* tk = tokens.data() + mb * B * T;
    const int32_t* tg = targets.data() + mb * B * T;
    const double ld = d.forward(0, tk, tg, B, T, 1.0f / 24);
    const double lm = m.forward(0, tk, tg, B, T, 1.0f / 24);
    EXPECT_EQ(ld, lm);
    d.backward(0, tk, B, T);
    m.backward(0, tk, B, T);
  }
  for (const ParamTensor& t : m.layout().tensors()) {
    const float* gm = m.grads() + t.offset;
    if (t.slot == Slot::RouterW) {
      for (size_t j = 0; j < t.numel; ++j) ASSERT_EQ(gm[j], 0.0f) << t.name;
      continue;
    }
    Slot from = t.slot == Slot::ExpertFcW ? Slot::FcW
                : t.slot == Slot::ExpertProjW ? Slot::FcProjW : t.slot;
    const std::vector<float> a(gm, gm + t.numel);
    const float* gd = d.grads() + d.layout().offset(from, t.layer);
    EXPECT_TRUE(same_bits(a, std::vector<float>(gd, gd + t.numel))) << t.name;
  }
  const std::vector<MoeLayerStats> stats = m.take_moe_stats();
  ASSERT_EQ(stats.size(), 2u);
  EXPECT_EQ(stats[0].tokens_per_expert[0], 2 * B * T);
  EXPECT_DOUBLE_EQ(stats[0].aux_loss, 2.0);  // E f P = 1 per micro-batch
  EXPECT_TRUE(d.take_moe_stats().empty());
}

// moe_layers(begin, end) counts the layers is_moe_layer names, for every step and count of dense
// first layers (--moe-every, --moe-first-dense), so that moe_layers(0, l) is MoE layer l's index.
TEST(Moe, MoeLayersCountsWhatIsMoeLayerNames) {
  ModelConfig c = llama(32);
  c.n_layer = 9;
  c.n_experts = 4;
  for (c.moe_every = 1; c.moe_every <= 4; ++c.moe_every)
    for (c.moe_first_dense = 0; c.moe_first_dense <= 9; ++c.moe_first_dense)
      for (int begin = 0; begin <= c.n_layer; ++begin)
        for (int end = begin; end <= c.n_layer; ++end) {
          int n = 0;
          for (int l = begin; l < end; ++l) n += c.is_moe_layer(l) ? 1 : 0;
          ASSERT_EQ(c.moe_layers(begin, end), n)
              << "every " << c.moe_every << " first dense " << c.moe_first_dense << " [" << begin
              << ", " << end << ")";
        }
  c.moe_every = 2;
  c.moe_first_dense = 4;  // MoE: 5, 7
  EXPECT_FALSE(c.is_moe_layer(3));
  EXPECT_TRUE(c.is_moe_layer(5));
  EXPECT_EQ(c.moe_layers(0, 7), 1);  // layer 7 is MoE layer 1
}

// ---- one MoeLayer against a naive reference written here, in double ----------------------

namespace {

struct Layer {
  static constexpr int E = 6, K = 2, C = 6, Fe = 4, R = 7;
  CpuBackend<double> backend{1};
  MoeLayer<double> moe;
  std::vector<double> acts, stats, scratch, scratch_stats;
  std::vector<int32_t> ids;
  MoeActs<double> a;
  std::vector<double> x, wr, w1, w2;  // (R,C) (E,C) (E,2Fe,C) (E,C,Fe)
  std::vector<float> bias;            // (E) the expert bias, empty: none
  std::vector<double> wg, shared;     // (C) (R,C) the shared experts' gate and output

  const MoeRouting routing;

  Layer(float aux, float z, MoeRouting how = {})
      : moe(backend, E, K, how, C, Fe, R, aux, z, MoeAuxLoss::PerLayer, Precision::Fp32, nullptr),
        acts(MoeLayer<double>::kept_acts(R, K, C, Fe)),
        stats(MoeLayer<double>::kept_stats(R, E, K, C, how.shared_gate)),
        scratch(MoeLayer<double>::scratch_acts(R, K, C, Fe)),
        scratch_stats(MoeLayer<double>::scratch_stats(R, E, K, C)),
        ids(MoeLayer<double>::kept_ids(R, E, K)),
        routing(how) {
    Buf<double> ac = acts.data();
    double* st = stats.data();
    int32_t* id = ids.data();
    moe.carve(a, ac, st, id);
    EXPECT_EQ(ac.full(), acts.data() + acts.size());
    EXPECT_EQ(st, stats.data() + stats.size());
    EXPECT_EQ(id, ids.data() + ids.size());
    moe.set_scratch(scratch.data(), scratch_stats.data());
    Rng rng(21, 0);
    auto draw = [&](std::vector<double>& v, size_t n, double s) {
      v.resize(n);
      for (double& e : v) e = s * rng.normal();
    };
    draw(x, R * C, 1.0);
    draw(wr, E * C, 0.5);
    draw(w1, E * 2 * Fe * C, 0.4);
    draw(w2, E * C * Fe, 0.4);
    draw(wg, C, 0.5);
    draw(shared, R * C, 1.0);
  }
  // out = the routed sum, + the shared experts' output times its gate under routing.shared_gate
  std::vector<double> forward(MoeLayerStats* st) {
    std::vector<double> out = routing.shared_gate ? shared : std::vector<double>(R * C);
    moe.forward(a, out.data(), routing.shared_gate, x.data(), wr.data(),
                routing.shared_gate ? wg.data() : nullptr, w1.data(), w2.data(),
                bias.empty() ? nullptr : bias.data(), R, st);
    return out;
  }
};

// The reference: the scores (softmax, or each expert's sigmoid), routing by a sort on (score +
// bias descending, index ascending), with groups among the experts of the M groups of the
// largest sums of their K/M largest keys (Megatron-Core's group_limited_topk), each chosen
// expert's SwiGLU on the row, the gated sum (gates scale x the scores renormalised over the
// chosen, or as they are); and the aux loss (over the softmax, or the sigmoid scores normalised
// per row, as Megatron-Core's; its counts those of the top k of the scores alone, as
// Megatron-Core's and DeepSeek-V3's where there is a bias or groups) and z-loss from their
// definitions.
struct Reference {
  std::vector<double> out;                // (R,C)
  std::vector<int> counts, aux_counts;    // (E) the routing's; the aux loss's
  double aux = 0, z = 0;
};

Reference reference(const Layer& L) {
  const int E = Layer::E, K = Layer::K, C = Layer::C, Fe = Layer::Fe, R = Layer::R;
  Reference ref;
  ref.out.assign(R * C, 0.0);
  for (int r = 0; L.routing.shared_gate && r < R; ++r) {  // sigmoid(x . wg) x the shared output
    double s = 0;
    for (int c = 0; c < C; ++c) s += L.x[r * C + c] * L.wg[c];
    for (int c = 0; c < C; ++c) ref.out[r * C + c] = L.shared[r * C + c] / (1 + std::exp(-s));
  }
  ref.counts.assign(E, 0);
  ref.aux_counts.assign(E, 0);
  std::vector<double> P(E, 0.0);
  for (int r = 0; r < R; ++r) {
    std::vector<double> zr(E), p(E);
    for (int e = 0; e < E; ++e)
      for (int c = 0; c < C; ++c) zr[e] += L.x[r * C + c] * L.wr[e * C + c];
    double mx = *std::max_element(zr.begin(), zr.end()), s = 0;
    for (int e = 0; e < E; ++e) s += std::exp(zr[e] - mx);
    const double lse = mx + std::log(s);
    for (int e = 0; e < E; ++e)
      p[e] = L.routing.sigmoid ? 1 / (1 + std::exp(-zr[e])) : std::exp(zr[e] - lse);
    std::vector<double> key = p;
    for (size_t e = 0; e < L.bias.size(); ++e) key[e] += L.bias[e];
    if (L.routing.groups > 1) {  // the keys of the experts outside the M best groups: -inf
      const int G = L.routing.groups, M = L.routing.group_topk, Eg = E / G;
      std::vector<double> worth(G);
      for (int g = 0; g < G; ++g) {  // the sum of the group's K/M largest keys
        std::vector<double> in(key.begin() + g * Eg, key.begin() + (g + 1) * Eg);
        std::sort(in.rbegin(), in.rend());
        worth[g] = std::accumulate(in.begin(), in.begin() + K / M, 0.0);
      }
      std::vector<int> groups(G);
      std::iota(groups.begin(), groups.end(), 0);
      std::stable_sort(groups.begin(), groups.end(),
                       [&](int i, int j) { return worth[i] > worth[j]; });
      for (int e = 0; e < E; ++e)
        if (std::find(groups.begin(), groups.begin() + M, e / Eg) == groups.begin() + M)
          key[e] = -std::numeric_limits<double>::infinity();
    }
    std::vector<int> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::vector<int> by_score = order;
    std::stable_sort(order.begin(), order.end(), [&](int i, int j) { return key[i] > key[j]; });
    std::stable_sort(by_score.begin(), by_score.end(), [&](int i, int j) { return p[i] > p[j]; });
    for (int k = 0; k < K; ++k) ++ref.aux_counts[by_score[k]];
    const double floor = L.routing.sigmoid ? 1e-20 : 0;
    double chosen = floor;
    for (int k = 0; k < K; ++k) chosen += p[order[k]];
    for (int k = 0; k < K; ++k) {
      const int e = order[k];
      ++ref.counts[e];
      for (int o = 0; o < C; ++o) {
        double y = 0;
        for (int f = 0; f < Fe; ++f) {
          double gate = 0, up = 0;
          for (int c = 0; c < C; ++c) {
            gate += L.w1[(e * 2 * Fe + f) * C + c] * L.x[r * C + c];
            up += L.w1[(e * 2 * Fe + Fe + f) * C + c] * L.x[r * C + c];
          }
          y += L.w2[(e * C + o) * Fe + f] * gate / (1 + std::exp(-gate)) * up;
        }
        ref.out[r * C + o] += L.routing.scale * (L.routing.norm_topk ? p[e] / chosen : p[e]) * y;
      }
    }
    const double all = std::accumulate(p.begin(), p.end(), floor);
    for (int e = 0; e < E; ++e) P[e] += (L.routing.sigmoid ? p[e] / all : p[e]) / R;
    ref.z += lse * lse / R;
  }
  for (int e = 0; e < E; ++e) ref.aux += E * (static_cast<double>(ref.aux_counts[e]) / R) * P[e];
  return ref;
}

}  // namespace

// Routing, dispatch, the grouped expert GEMMs and the combine equal the naive per-row reference;
// the aux loss E sum f_e P_e and the z-loss mean lse^2 equal their formulas on that routing;
// the tokens per expert sum to R*K; for every router: softmax or sigmoid scores, gates
// renormalised or not (--moe-norm-topk), scaled (--moe-route-scale), chosen with an expert bias
// (--moe-expert-bias), limited to groups (--moe-router-groups: 3 of 2 experts choosing 1, 2 of 3
// choosing 1). Measured: 9e-16 at most (double); tolerance 5e-15.
struct Router {
  MoeRouting how;
  bool bias;
};
class MoeGates : public ::testing::TestWithParam<Router> {
 protected:
  // The router's bias (large enough to change some choices) where it has one.
  static void add_bias(Layer& L) {
    if (GetParam().bias) L.bias = {0.3f, -0.2f, 0.0f, 0.15f, -0.25f, 0.1f};
  }
};

TEST_P(MoeGates, LayerMatchesTheReferenceAndItsLosses) {
  Layer L(0.01f, 0.001f, GetParam().how);
  add_bias(L);
  MoeLayerStats st{};
  const std::vector<double> out = L.forward(&st);
  const Reference ref = reference(L);
  double worst = std::max(std::abs(st.aux_loss - ref.aux), std::abs(st.z_loss - ref.z));
  for (size_t i = 0; i < out.size(); ++i) {
    worst = std::max(worst, std::abs(out[i] - ref.out[i]));
    ASSERT_NEAR(out[i], ref.out[i], 5e-15) << i;
  }
  std::printf("moe layer vs reference: max difference %.2e\n", worst);
  ASSERT_EQ(st.tokens_per_expert.size(), static_cast<size_t>(Layer::E));
  for (int e = 0; e < Layer::E; ++e) EXPECT_EQ(st.tokens_per_expert[e], ref.counts[e]) << e;
  EXPECT_EQ(std::accumulate(st.tokens_per_expert.begin(), st.tokens_per_expert.end(), int64_t{0}),
            Layer::R * Layer::K);
  if (GetParam().bias || GetParam().how.groups > 1) {  // the bias or the groups move some
    EXPECT_NE(ref.counts, ref.aux_counts);             // choice: the aux loss counts others
  }
  EXPECT_EQ(st.rows, Layer::R);
  EXPECT_NEAR(st.aux_loss, ref.aux, 5e-15);
  EXPECT_NEAR(st.z_loss, ref.z, 5e-15);
  EXPECT_GT(st.z_loss, 0.0);
}

// The layer's backward against central differences of the objective
// sum(out * dout) + (aux_coef aux + z_coef z) R dloss, for x, Wr, We1, We2 (the routing does not
// change for h = 1e-6 here), gates renormalised or not. Measured max error 2.7e-9; tolerance
// expect_grad's 1e-8 + 1e-6 relative.
TEST_P(MoeGates, LayerBackwardMatchesFiniteDifferences) {
  const float aux_coef = 0.3f, z_coef = 0.2f;  // large, so their terms are visible
  Layer L(aux_coef, z_coef, GetParam().how);
  add_bias(L);
  const int R = Layer::R, C = Layer::C;
  const double dloss = 0.7;
  std::vector<double> dout(R * C);
  Rng rng(9, 0);
  for (double& v : dout) v = rng.normal();
  auto objective = [&] {
    MoeLayerStats st{};
    const std::vector<double> out = L.forward(&st);
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += out[i] * dout[i];
    return s + (aux_coef * st.aux_loss + z_coef * st.z_loss) * R * dloss;
  };
  objective();
  std::vector<double> dx(R * C), dwr(L.wr.size()), dw1(L.w1.size()), dw2(L.w2.size()),
      dwg(L.wg.size()), dshared(L.shared.size());
  const bool gated = GetParam().how.shared_gate;
  if (gated) L.moe.shared_gate_backward(L.a, dout.data(), dshared.data(), R);
  L.moe.backward(L.a, dx.data(), false, dout.data(), L.x.data(), L.wr.data(),
                 gated ? L.wg.data() : nullptr, L.w1.data(), L.w2.data(), dwr.data(),
                 gated ? dwg.data() : nullptr, dw1.data(), dw2.data(), R, dloss, nullptr, nullptr);
  if (gated) {
    mpitrain::testing::expect_grad("shared experts' output", L.shared, dshared, objective);
    mpitrain::testing::expect_grad("shared gate", L.wg, dwg, objective);
  }
  mpitrain::testing::expect_grad("x", L.x, dx, objective);
  mpitrain::testing::expect_grad("router", L.wr, dwr, objective);
  mpitrain::testing::expect_grad("experts.fc", L.w1, dw1, objective);
  mpitrain::testing::expect_grad("experts.proj", L.w2, dw2, objective);
}

INSTANTIATE_TEST_SUITE_P(
    Routers, MoeGates,
    ::testing::Values(Router{{false, true, 1}, false}, Router{{false, false, 1}, false},
                      Router{{false, true, 1.8f}, false}, Router{{true, true, 2.5f}, true},
                      Router{{true, false, 1}, false}, Router{{true, false, 1}, true},
                      Router{{false, true, 1, 3, 1}, false}, Router{{true, true, 2.5f, 2, 1}, true},
                      Router{{false, false, 1, 1, 0, true}, false}),
    [](const ::testing::TestParamInfo<Router>& info) {
      const Router& r = info.param;
      return std::string(r.how.sigmoid ? "Sigmoid" : "Softmax") +
             (r.how.norm_topk ? "Normalised" : "AsTheyAre") + (r.how.scale != 1 ? "Scaled" : "") +
             (r.bias ? "ExpertBias" : "") +
             (r.how.groups > 1 ? "Groups" + std::to_string(r.how.groups) : "") +
             (r.how.shared_gate ? "SharedGate" : "");
    });

// The bias moves the choice and not the gates: an expert whose bias outweighs any score gap is
// every row's first choice, its gate its own score (the sigmoid router's gates, unnormalised).
TEST(Moe, ExpertBiasChoosesWithoutEnteringTheGates) {
  Layer L(0.0f, 0.0f, MoeRouting{true, false, 1});
  L.bias = {0, 0, 0, 2.0f, 0, 0};  // sigmoid scores lie in (0, 1): 2 outweighs any gap
  MoeLayerStats st{};
  L.forward(&st);
  EXPECT_EQ(st.tokens_per_expert[3], Layer::R);
  for (int r = 0; r < Layer::R; ++r) {
    EXPECT_EQ(L.a.experts[r * Layer::K], 3) << r;
    EXPECT_EQ(L.a.gates[r * Layer::K], L.a.probs[r * Layer::E + 3]) << r;  // the score alone
  }
}

// A group is worth the sum of its top K/M keys, not its best one (Megatron-Core's
// group_limited_topk; DeepSeek-V3's top 2): biases that outweigh the sigmoid scores make group 0
// {3, 0, 0} the better by its best key and group 1 {2, 2, 0} by its top two, so every row takes
// experts 3 and 4 of group 1.
TEST(Moe, AGroupIsWorthItsTopKeysSummed) {
  Layer L(0.0f, 0.0f, MoeRouting{true, false, 1, 2, 1});
  L.bias = {3.0f, 0, 0, 2.0f, 2.0f, 0};
  MoeLayerStats st{};
  L.forward(&st);
  EXPECT_EQ(st.tokens_per_expert, (std::vector<int64_t>{0, 0, 0, Layer::R, Layer::R, 0}));
}

// Each expert's bias moves by the rate towards the mean load: up below it, down above it, not at
// it (Megatron-Core's sign(mean - load)); the mean need not be an integer.
TEST(Moe, ExpertBiasMovesTowardsTheMeanLoad) {
  std::vector<float> bias = {0.5f, 0.0f, -0.25f, 0.0f};
  update_expert_bias(bias.data(), {5, 3, 3, 1}, 0.125f);  // mean 3
  EXPECT_EQ(bias, (std::vector<float>{0.375f, 0.0f, -0.25f, 0.125f}));
  update_expert_bias(bias.data(), {2, 1, 1, 1}, 0.125f);  // mean 1.25
  EXPECT_EQ(bias, (std::vector<float>{0.25f, 0.125f, -0.125f, 0.25f}));
}

// The tie rule: router rows 1 and 2 equal give every row p1 == p2 exactly; rows 3 = 2 w1,
// 4 = 0 and 0 = 5 = -w1 with every row's x . w1 > 0 put the tie at the top-2 boundary
// (z3 > z1 = z2 > z4 > z0 = z5), so every row chooses expert 1, the lower index, and never 2.
TEST(Moe, TiesGoToTheLowerExpertIndex) {
  Layer L(0.0f, 0.0f);
  for (int r = 0; r < Layer::R; ++r) {  // every row's s = x . w1 > 0
    double s = 0;
    for (int c = 0; c < Layer::C; ++c) s += L.x[r * Layer::C + c] * L.wr[Layer::C + c];
    if (s < 0)
      for (int c = 0; c < Layer::C; ++c) L.x[r * Layer::C + c] = -L.x[r * Layer::C + c];
  }
  for (int c = 0; c < Layer::C; ++c) {
    const double w = L.wr[Layer::C + c];
    L.wr[2 * Layer::C + c] = w;
    L.wr[3 * Layer::C + c] = 2 * w;
    L.wr[c] = L.wr[5 * Layer::C + c] = -w;
    L.wr[4 * Layer::C + c] = 0;
  }
  MoeLayerStats st{};
  L.forward(&st);
  EXPECT_EQ(st.tokens_per_expert[1], Layer::R);
  EXPECT_EQ(st.tokens_per_expert[2], 0);
  for (int r = 0; r < Layer::R; ++r) {
    EXPECT_EQ(L.a.probs[r * Layer::E + 1], L.a.probs[r * Layer::E + 2]);  // an exact tie
    EXPECT_EQ(L.a.experts[r * Layer::K + 1], 1) << r;  // the second choice: the tie
  }
}

// The device's way (MPITRAIN_MOE_STAGED=1: every backend tensor the host code reads or writes
// goes through download / upload into the layer's host buffers) gives the host path's bits:
// forward adding into an output that holds a value (the shared experts', gated), backward adding
// into gradients that hold values (dx, and Wr's and the gate's, whose device copies are
// downloaded, summed into and uploaded), the gradient of the shared experts' output, and the
// statistics. A staged copy left out (e.g. Wr's gradient not uploaded) fails it.
TEST(Moe, StagedLikeADeviceKeepsEveryBit) {
  struct Pass {
    std::vector<double> out, dx, dwr, dw1, dw2, dwg, dshared;
    MoeLayerStats stats{};
  };
  auto pass = [](bool staged) {
    if (staged) setenv("MPITRAIN_MOE_STAGED", "1", 1);
    Layer L(0.3f, 0.2f, MoeRouting{.shared_gate = true});
    unsetenv("MPITRAIN_MOE_STAGED");
    const int R = Layer::R, C = Layer::C;
    Pass p;
    Rng rng(5, 0);
    auto draw = [&](std::vector<double>& v, size_t n) {
      v.resize(n);
      for (double& e : v) e = rng.normal();
    };
    std::vector<double> dout;
    draw(p.out, R * C);
    draw(dout, R * C);
    draw(p.dx, R * C);
    draw(p.dwr, L.wr.size());
    draw(p.dw1, L.w1.size());
    draw(p.dw2, L.w2.size());
    draw(p.dwg, L.wg.size());
    draw(p.dshared, R * C);
    L.moe.forward(L.a, p.out.data(), true, L.x.data(), L.wr.data(), L.wg.data(), L.w1.data(),
                  L.w2.data(), nullptr, R, &p.stats);
    L.moe.shared_gate_backward(L.a, dout.data(), p.dshared.data(), R);
    L.moe.backward(L.a, p.dx.data(), true, dout.data(), L.x.data(), L.wr.data(), L.wg.data(),
                   L.w1.data(), L.w2.data(), p.dwr.data(), p.dwg.data(), p.dw1.data(), p.dw2.data(),
                   R, 0.7, nullptr, nullptr);
    return p;
  };
  const Pass host = pass(false), staged = pass(true);
  EXPECT_TRUE(same_bits(host.out, staged.out));
  EXPECT_TRUE(same_bits(host.dx, staged.dx));
  EXPECT_TRUE(same_bits(host.dwr, staged.dwr)) << "the router's gradient";
  EXPECT_TRUE(same_bits(host.dw1, staged.dw1));
  EXPECT_TRUE(same_bits(host.dw2, staged.dw2));
  EXPECT_TRUE(same_bits(host.dwg, staged.dwg)) << "the shared gate's gradient";
  EXPECT_TRUE(same_bits(host.dshared, staged.dshared)) << "the shared experts' output gradient";
  EXPECT_EQ(host.stats.aux_loss, staged.stats.aux_loss);
  EXPECT_EQ(host.stats.z_loss, staged.stats.z_loss);
  EXPECT_EQ(host.stats.tokens_per_expert, staged.stats.tokens_per_expert);
}

// The host loops (router, top-k, gather, combine, their backward) split rows and experts over
// OpenMP's threads with every element summed in the serial order: a layer large enough to run
// them in parallel (R K C = 38400 elements, above kParallelWork) gives the same bits on 1 and 2
// threads (the expert GEMMs on 1 BLAS thread in both). Summing dWr over rows split between the
// threads fails it.
TEST(Moe, HostLoopsGiveTheSameBitsOnAnyThreadCount) {
  const int E = 8, K = 2, C = 64, Fe = 16, R = 300;
  struct Pass {
    std::vector<double> out, dx, dwr, dw1, dw2;
    double aux = 0, z = 0;
  };
  auto pass = [&](int threads) {
    CpuBackend<double> backend(1);
    omp_set_num_threads(threads);  // the host loops' threads; BLAS keeps the backend's 1
    MoeLayer<double> moe(backend, E, K, MoeRouting{}, C, Fe, R, 0.3f, 0.2f, MoeAuxLoss::PerLayer,
                         Precision::Fp32, nullptr);
    std::vector<double> acts(MoeLayer<double>::kept_acts(R, K, C, Fe)),
        stats(MoeLayer<double>::kept_stats(R, E, K, C, false)),
        scratch(MoeLayer<double>::scratch_acts(R, K, C, Fe)),
        scratch_stats(MoeLayer<double>::scratch_stats(R, E, K, C));
    std::vector<int32_t> ids(MoeLayer<double>::kept_ids(R, E, K));
    MoeActs<double> a;
    Buf<double> ac = acts.data();
    double* st = stats.data();
    int32_t* id = ids.data();
    moe.carve(a, ac, st, id);
    moe.set_scratch(scratch.data(), scratch_stats.data());
    Rng rng(17, 0);
    auto draw = [&](size_t n, double scale) {
      std::vector<double> v(n);
      for (double& e : v) e = scale * rng.normal();
      return v;
    };
    const std::vector<double> x = draw(R * C, 1), wr = draw(E * C, 0.5),
                              w1 = draw(E * 2 * Fe * C, 0.3), w2 = draw(E * C * Fe, 0.3),
                              dout = draw(R * C, 1);
    Pass p;
    p.out.assign(R * C, 0);
    p.dx.assign(R * C, 0);
    p.dwr.assign(E * C, 0);
    p.dw1.assign(w1.size(), 0);
    p.dw2.assign(w2.size(), 0);
    MoeLayerStats s{};
    moe.forward(a, p.out.data(), false, x.data(), wr.data(), nullptr, w1.data(), w2.data(), nullptr,
                R, &s);
    moe.backward(a, p.dx.data(), false, dout.data(), x.data(), wr.data(), nullptr, w1.data(),
                 w2.data(), p.dwr.data(), nullptr, p.dw1.data(), p.dw2.data(), R, 0.01, nullptr,
                 nullptr);
    p.aux = s.aux_loss;
    p.z = s.z_loss;
    omp_set_num_threads(1);
    return p;
  };
  const Pass one = pass(1), two = pass(2);
  EXPECT_TRUE(same_bits(one.out, two.out));
  EXPECT_TRUE(same_bits(one.dx, two.dx));
  EXPECT_TRUE(same_bits(one.dwr, two.dwr)) << "the router's gradient";
  EXPECT_TRUE(same_bits(one.dw1, two.dw1));
  EXPECT_TRUE(same_bits(one.dw2, two.dw2));
  EXPECT_EQ(one.aux, two.aux);
  EXPECT_EQ(one.z, two.z);
}

// ---- the whole model ---------------------------------------------------------------------

namespace {

// A double model of `config` whose objective weights the aux loss of `form` by aux_coef and the
// z-loss by z_coef, its parameters moved off their initial values, and one micro-batch's tokens.
struct DoubleMoe {
  static constexpr int B = 2, T = 5;
  CpuBackend<double> backend{1};
  ModelOptions options;
  std::unique_ptr<Model<double>> model;
  std::vector<int32_t> tokens, targets;

  DoubleMoe(const ModelConfig& config, MoeAuxLoss form, float aux_coef, float z_coef) {
    options.moe_aux_loss_coef = aux_coef;
    options.moe_z_loss_coef = z_coef;
    options.moe_aux_loss = form;
    model =
        std::make_unique<Model<double>>(config, backend, ModelShard{}, B, T, 1, nullptr, options);
    model->init(7);
    perturb(*model, 0.1, 11);
    fill_tokens<double>(B * T, config.vocab_size, tokens, targets);
  }
};

// Gradient of the objective mean CE + aux_coef sum aux + z_coef sum z (dloss = 1/(B T)) against
// central differences of it, in double, for every parameter of the model; the aux loss of the
// form given (all-layers: reported by backward, so each evaluation runs one).
void check_model_gradients(const ModelConfig& config, MoeAuxLoss form, double* worst) {
  // all-layers: a weight at which its gradient shows
  DoubleMoe m(config, form, form == MoeAuxLoss::AllLayers ? 0.3f : 0.05f, 0.02f);
  const int B = m.B, T = m.T;
  const ModelOptions& options = m.options;
  Model<double>& model = *m.model;
  const std::vector<int32_t>&tokens = m.tokens, &targets = m.targets;
  const double dloss = 1.0 / (B * T);
  auto objective = [&] {
    double loss = model.forward(0, tokens.data(), targets.data(), B, T, 0.0) * dloss;
    model.backward(0, tokens.data(), B, T);
    for (const MoeLayerStats& s : model.take_moe_stats())
      loss += (options.moe_aux_loss_coef * s.aux_loss + options.moe_z_loss_coef * s.z_loss) *
              B * T * dloss;
    return loss;
  };
  model.zero_grads();
  model.forward(0, tokens.data(), targets.data(), B, T, dloss);
  model.backward(0, tokens.data(), B, T);
  model.take_moe_stats();
  const std::vector<double> analytic(model.grads(), model.grads() + model.num_params());
  for (const ParamTensor& t : model.layout().tensors()) {
    for (size_t j = 0; j < t.numel; ++j) {
      double& w = model.params().full()[t.offset + j];
      const double saved = w, h = 1e-5;
      w = saved + h;
      const double up = objective();
      w = saved - h;
      const double down = objective();
      w = saved;
      const double numeric = (up - down) / (2 * h), a = analytic[t.offset + j];
      *worst = std::max(*worst, std::abs(a - numeric));
      ASSERT_NEAR(a, numeric, 1e-7 * (1 + std::abs(numeric))) << t.name << "[" << j << "]";
    }
  }
}

}  // namespace

// Every gradient of an MoE model (router, routed experts, shared experts, and through the MoE
// layers' input every parameter below them) with the aux and z losses in the objective, E = 4,
// K = 2: in every layer with a shared expert, and in every second layer (layer 0 dense) without;
// the aux loss per layer, and over all layers' routing pooled (two MoE layers: each layer's
// router gradient takes the other's counts; with its own instead, the router's gradients are
// off by up to 1.4e-4); the shared expert gated (its gate's weights, and the gate's path to the
// layer's input).
// Measured max error 5e-9 (h = 1e-5); tolerance 1e-7 (+ relative), as the dense check's.
TEST(Moe, ModelGradientsMatchFiniteDifferences) {
  double worst = 0;
  for (MoeAuxLoss form : {MoeAuxLoss::PerLayer, MoeAuxLoss::AllLayers}) {
    check_model_gradients(moe(1, 1), form, &worst);
    check_model_gradients(moe(0, 2), form, &worst);
  }
  check_model_gradients(gated_shared(), MoeAuxLoss::PerLayer, &worst);
  std::printf("moe model gradients: max |analytic - numeric| %.2e\n", worst);
}

// With one MoE layer (L = 1) pooling changes nothing: the all-layers form gives the per-layer
// gradients bit for bit (w_e = C_e / 1 = counts[e]) and its aux loss within rounding (summed in
// another order; measured equal). With two, the losses differ (the check that the form is used).
TEST(Moe, AllLayersIsPerLayerForOneMoeLayer) {
  auto run_form = [](const ModelConfig& config, MoeAuxLoss form) {
    DoubleMoe m(config, form, 0.3f, 0.0f);
    Model<double>& model = *m.model;
    model.zero_grads();
    model.forward(0, m.tokens.data(), m.targets.data(), m.B, m.T, 1.0 / (m.B * m.T));
    model.backward(0, m.tokens.data(), m.B, m.T);
    double aux = 0;
    for (const MoeLayerStats& st : model.take_moe_stats()) aux += st.aux_loss;
    return std::pair{aux, std::vector<double>(model.grads(), model.grads() + model.num_params())};
  };
  const auto [per_layer, per_layer_grads] = run_form(moe(0, 2), MoeAuxLoss::PerLayer);
  const auto [all_layers, all_layers_grads] = run_form(moe(0, 2), MoeAuxLoss::AllLayers);
  EXPECT_NEAR(all_layers, per_layer, 1e-14 * per_layer);
  EXPECT_TRUE(same_bits(all_layers_grads, per_layer_grads));
  const double two_per_layer = run_form(moe(1, 1), MoeAuxLoss::PerLayer).first;
  const double two_all_layers = run_form(moe(1, 1), MoeAuxLoss::AllLayers).first;
  EXPECT_GT(std::abs(two_per_layer - two_all_layers), 0.1 * two_all_layers)
      << "two MoE layers: per layer (summed, about 2 K) " << two_per_layer << ", pooled (about K) "
      << two_all_layers;
}

namespace {

struct Outcome {
  std::vector<double> losses;
  std::vector<float> grads;
  std::vector<MoeLayerStats> stats;
  size_t activation_bytes = 0;
};

// Two micro-batches in two slots, F0 F1 B0 B1 (recomputation's shared buffers overwritten
// between a forward and its backward), float.
Outcome run(const ModelConfig& config, ModelOptions options) {
  CpuBackend<float> backend(1, options.precision);
  const int B = 2, T = 6;
  Model<float> model(config, backend, {}, B, T, 2, nullptr, options);
  model.init(3);  // 2-byte storage: rounded as written (init, then perturb); fp32: rounded here
  auto round_emulated = [&] {
    if (float* emulated = model.params().full())
      backend.round_to(emulated, model.num_params(), options.precision);
  };
  round_emulated();
  perturb(model, 0.05, 4);
  round_emulated();
  std::vector<int32_t> tokens, targets;
  fill_tokens<float>(2 * B * T, config.vocab_size, tokens, targets);
  Outcome r;
  model.zero_grads();
  for (int m = 0; m < 2; ++m)
    r.losses.push_back(model.forward(m, tokens.data() + m * B * T, targets.data() + m * B * T, B,
                                     T, 1.0f / 24));
  for (int m = 0; m < 2; ++m) model.backward(m, tokens.data() + m * B * T, B, T);
  r.grads.assign(model.grads(), model.grads() + model.num_params());
  r.stats = model.take_moe_stats();
  r.activation_bytes = model.activation_bytes();
  return r;
}

ModelOptions with(Precision precision, Recompute recompute, Precision storage = Precision::Fp32) {
  ModelOptions o;
  o.precision = precision;
  o.recompute = recompute;
  o.storage = storage;
  o.moe_z_loss_coef = 0.01f;
  return o;
}

}  // namespace

// Recomputation (full recomputes the MoE forward too) and 2-byte storage keep every bit of the
// losses, gradients and statistics (counted once: not again when recomputed).
TEST(Moe, RecomputationAndTwoByteStorageKeepTheirBits) {
  for (Precision precision : {Precision::Fp32, Precision::Bf16}) {
    for (const ModelConfig& config : {moe(1, 1), moe(0, 2), gated_shared()}) {
      const Outcome none = run(config, with(precision, Recompute::None));
      ASSERT_FALSE(none.stats.empty());
      for (Recompute rc : {Recompute::None, Recompute::Selective, Recompute::Full}) {
        for (Precision storage : {Precision::Fp32, precision}) {
          if (rc == Recompute::None && storage == Precision::Fp32) continue;
          const Outcome r = run(config, with(precision, rc, storage));
          EXPECT_EQ(r.losses, none.losses) << to_string(rc);
          EXPECT_TRUE(same_bits(r.grads, none.grads)) << to_string(rc);
          ASSERT_EQ(r.stats.size(), none.stats.size());
          for (size_t i = 0; i < r.stats.size(); ++i) {
            EXPECT_EQ(r.stats[i].aux_loss, none.stats[i].aux_loss);
            EXPECT_EQ(r.stats[i].z_loss, none.stats[i].z_loss);
            EXPECT_EQ(r.stats[i].tokens_per_expert, none.stats[i].tokens_per_expert);
            EXPECT_EQ(r.stats[i].rows, none.stats[i].rows);
          }
          if (storage == Precision::Fp32 && rc != Recompute::None) {
            EXPECT_LT(r.activation_bytes, none.activation_bytes);
          }
        }
      }
    }
  }
}

// bf16 against fp32: bf16's relative step 2^-8; measured loss difference 1.4e-4 relative,
// gradient norm difference 7e-3 relative; bounds 1e-3 and 3e-2.
TEST(Moe, Bf16StaysNearFp32) {
  const ModelConfig config = moe(1, 1);
  const Outcome fp32 = run(config, with(Precision::Fp32, Recompute::None));
  const Outcome bf16 = run(config, with(Precision::Bf16, Recompute::None));
  for (size_t m = 0; m < fp32.losses.size(); ++m) {
    EXPECT_NEAR(bf16.losses[m], fp32.losses[m], 1e-3 * std::abs(fp32.losses[m]));
    EXPECT_NE(bf16.losses[m], fp32.losses[m]);
  }
  double diff = 0, ref = 0;
  for (size_t i = 0; i < fp32.grads.size(); ++i) {
    diff += std::pow(static_cast<double>(bf16.grads[i]) - fp32.grads[i], 2);
    ref += std::pow(static_cast<double>(fp32.grads[i]), 2);
  }
  std::printf("moe bf16 vs fp32: loss %.2e relative, gradient %.2e relative\n",
              std::abs(bf16.losses[0] - fp32.losses[0]) / fp32.losses[0], std::sqrt(diff / ref));
  EXPECT_LT(std::sqrt(diff / ref), 3e-2);
}

namespace {

// ZeRO-2/3's lending in its simplest form: every unit lent from one whole buffer of parameters
// and one of gradients, so the model reaches the MoE tensors only through its units.
class WholeLender final : public UnitLender<float> {
 public:
  WholeLender(const ParamLayout& layout, const float* params)
      : layout_(layout), params_(params), whole_grads(layout.total(), 0.0f) {}
  CBuf<float> params(int u, bool) override { return params_ + layout_.units()[u].lo; }
  void params_done(int, bool) override {}
  // As UnitLender says: zeros where backward adds, NaN where it must write over (one backward).
  float* grads(int u) override {
    const FlatRange unit = layout_.units()[u];
    float* g = whole_grads.data() + unit.lo;
    std::fill_n(g, unit.size(), std::numeric_limits<float>::quiet_NaN());
    for (const FlatRange& r : added_gradient_ranges(layout_, unit))
      std::fill_n(g + r.lo, r.size(), 0.0f);
    return g;
  }
  void grads_done(int) override {}

 private:
  const ParamLayout& layout_;
  const float* params_;

 public:
  std::vector<float> whole_grads;
};

// Two pipeline stages (one layer each) and ZeRO-3's lent units give the single-stage model's
// loss and gradients bit for bit: nothing of the MoE layer lives outside its block's unit. With
// a tied wte the stages' two copies (the embedding's gradient, the head's) add up to the plain
// model's.
void expect_stages_and_lent_units_equal_the_plain_model(const ModelConfig& config) {
  CpuBackend<float> backend(1);
  const int B = 2, T = 6, N = B * T, C = config.d_model;
  std::vector<int32_t> tokens, targets;
  fill_tokens<float>(N, config.vocab_size, tokens, targets);
  const float dloss = 1.0f / N;
  // Gradient buffers start as NaN: what zero_grads leaves, the first backward must write over.
  const auto poisoned = [](Model<float>& m) {
    std::fill_n(m.grads(), m.num_params(), std::numeric_limits<float>::quiet_NaN());
    m.zero_grads();
  };
  Model<float> plain(config, backend, {}, B, T);
  plain.init(3);
  poisoned(plain);
  const double loss = plain.forward(0, tokens.data(), targets.data(), B, T, dloss);
  plain.backward(0, tokens.data(), B, T);
  const std::vector<float> whole(plain.grads(), plain.grads() + plain.num_params());
  const std::vector<MoeLayerStats> plain_stats = plain.take_moe_stats();

  ModelOptions lent;
  lent.lend_grads = lent.lend_params = true;
  Model<float> zero3(config, backend, {}, B, T, 1, nullptr, lent);
  WholeLender lender(zero3.layout(), plain.params().full());
  zero3.set_lender(&lender);
  EXPECT_EQ(zero3.forward(0, tokens.data(), targets.data(), B, T, dloss), loss);
  zero3.backward(0, tokens.data(), B, T);
  EXPECT_TRUE(same_bits(lender.whole_grads, whole));

  ModelShard first, second;
  first.layer_end = 1;
  first.last_stage = false;
  second.layer_begin = 1;
  second.first_stage = false;
  Model<float> s0(config, backend, first, B, T), s1(config, backend, second, B, T);
  s0.init(3);
  s1.init(3);
  poisoned(s0);
  poisoned(s1);
  s0.forward(0, tokens.data(), nullptr, B, T, dloss);
  std::copy_n(s0.output(0).full(), N * C, s1.input(0).full());
  EXPECT_EQ(s1.forward(0, nullptr, targets.data(), B, T, dloss), loss);
  s1.backward(0, nullptr, B, T);
  std::copy_n(s1.input_grad().full(), N * C, s0.output_grad().full());
  s0.backward(0, tokens.data(), B, T);
  for (Model<float>* s : {&s0, &s1})
    for (const ParamTensor& t : s->layout().tensors()) {
      if (t.slot == Slot::Wte && config.tie_embeddings) continue;  // the sum below
      const size_t at = plain.layout().find(t.name).offset;
      const float* g = s->grads() + t.offset;
      EXPECT_TRUE(same_bits(std::vector<float>(g, g + t.numel),
                            std::vector<float>(whole.begin() + at, whole.begin() + at + t.numel)))
          << t.name;
    }
  if (config.tie_embeddings) {  // in another order: a few float roundings of the largest term
    const float* embedding = s0.grads() + s0.layout().offset(Slot::Wte);
    const float* head = s1.grads() + s1.layout().offset(Slot::Wte);
    const size_t at = plain.layout().offset(Slot::Wte);
    for (size_t i = 0; i < plain.layout().find("wte").numel; ++i) {
      const float scale = std::abs(embedding[i]) + std::abs(head[i]);
      ASSERT_NEAR(embedding[i] + head[i], whole[at + i],
                  4 * std::numeric_limits<float>::epsilon() * scale)
          << i;
    }
  }
  const std::vector<MoeLayerStats> st0 = s0.take_moe_stats(), st1 = s1.take_moe_stats();
  ASSERT_EQ(st0.size(), 1u);
  ASSERT_EQ(st1.size(), 1u);
  EXPECT_EQ(st0[0].layer, 0);
  EXPECT_EQ(st1[0].layer, 1);
  EXPECT_EQ(st0[0].aux_loss, plain_stats[0].aux_loss);
  EXPECT_EQ(st1[0].tokens_per_expert, plain_stats[1].tokens_per_expert);
}

}  // namespace

TEST(Moe, PipelineStagesAndLentUnitsEqualThePlainModel) {
  expect_stages_and_lent_units_equal_the_plain_model(moe(1, 1));
}

TEST(Moe, PipelineStagesAndLentUnitsEqualThePlainModelWithAGatedSharedExpert) {
  expect_stages_and_lent_units_equal_the_plain_model(gated_shared());
}

TEST(Moe, PipelineStagesAndLentUnitsEqualThePlainModelWithATiedHead) {
  ModelConfig config = moe(1, 1);
  config.tie_embeddings = true;
  expect_stages_and_lent_units_equal_the_plain_model(config);
}
