// The optimizer (optim/optimizer.hpp): each kind against a plain double-precision version of its
// formula, an update of a range against the same part of a whole-buffer update, and master
// weights. LAMB over ranges that split tensors (norms summed over ranks) is tests/mpi's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/runtime/error.hpp"
#include "random_values.hpp"

using namespace mpitrain;
using mpitrain::test_inputs::random_floats;

namespace {

// A small gpt2: every kind of tensor (decayed matrices and embeddings, norms and biases without
// decay), widths that are no multiple of the 16-float vectors.
ModelConfig small_model() {
  ModelConfig c;
  c.arch = Arch::Gpt2;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_kv_head = 2;
  c.d_model = 24;
  c.d_ff = 40;
  c.vocab_size = 20;
  c.max_seq_len = 5;
  return c;
}

constexpr int kSteps = 3;
constexpr float kLr = 1e-2f, kGradScale = 0.5f;

OptimizerConfig config_of(OptimizerKind kind) {
  OptimizerConfig c;
  c.kind = kind;
  c.weight_decay = 0.1f;
  return c;
}

// The formulas of optimizer.hpp in double over the whole buffer: params p, state m (adamw, lamb:
// first moment; sgd: momentum buffer) and v.
struct Reference {
  std::vector<double> p, m, v;

  void step(const ParamLayout& layout, const OptimizerConfig& c, const std::vector<float>& grad,
            int t) {
    const double b1 = c.beta1, b2 = c.beta2, eps = c.eps, mu = c.momentum;
    for (const ParamTensor& tensor : layout.tensors()) {
      const double wd = tensor.decay ? c.weight_decay : 0.0;
      const size_t begin = tensor.offset, end = tensor.offset + tensor.numel;
      if (c.kind == OptimizerKind::Sgd) {
        for (size_t i = begin; i < end; ++i) {
          m[i] = mu * m[i] + double(grad[i]) * kGradScale;
          p[i] -= double(kLr) * (m[i] + wd * p[i]);
        }
        continue;
      }
      std::vector<double> u(tensor.numel);
      double pp = 0.0, uu = 0.0;
      for (size_t i = begin; i < end; ++i) {
        const double g = double(grad[i]) * kGradScale;
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        const double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
        u[i - begin] = mh / (std::sqrt(vh) + eps) + wd * p[i];
        pp += p[i] * p[i];
        uu += u[i - begin] * u[i - begin];
      }
      double ratio = 1.0;  // adamw; lamb for tensors without decay or with a zero norm
      if (c.kind == OptimizerKind::Lamb && tensor.decay && pp > 0 && uu > 0)
        ratio = std::sqrt(pp) / std::sqrt(uu);
      for (size_t i = begin; i < end; ++i) p[i] -= double(kLr) * ratio * u[i - begin];
    }
  }
};

// kSteps updates of the whole buffer by the float optimizer and by the double reference.
// Tolerance: after 3 steps of size lr = 1e-2 on values of size <= 1, float carries a few ulp
// (6e-8 each) from storing p, m, v and from the update's own rounding; 1e-6 is ~16 ulp of 1 and
// far below the smallest update (lr x wd x |p| ~ 1e-5 for the smallest |p| that matters).
void expect_matches_reference(OptimizerKind kind) {
  const ModelConfig cfg = small_model();
  const ParamLayout layout(cfg);
  const size_t n = layout.total();
  const OptimizerConfig c = config_of(kind);
  std::vector<float> params = random_floats(n, 1);
  // LAMB's trust ratio is 1 where ||w|| = 0: one decayed tensor starts at zero.
  const ParamTensor& zero = layout.find("h.1.attn.proj.weight");
  std::fill_n(params.begin() + zero.offset, zero.numel, 0.0f);
  Reference ref{std::vector<double>(params.begin(), params.end()), std::vector<double>(n, 0.0),
                std::vector<double>(n, 0.0)};
  CpuBackend<float> backend(1);
  Optimizer opt(backend, layout, c, params.data(), ShardRanges::whole(n), Precision::Fp32);
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> grad = random_floats(n, 100 + t);
    opt.step(grad.data(), kLr, kGradScale);
    ref.step(layout, c, grad, t);
  }
  EXPECT_EQ(opt.steps_taken(), kSteps);
  ASSERT_EQ(opt.state().size(), kind == OptimizerKind::Sgd ? 1u : 2u);
  double worst = 0.0;
  for (size_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(params[i] - ref.p[i]));
    worst = std::max(worst, std::abs(opt.state()[0][i] - ref.m[i]));
    if (kind != OptimizerKind::Sgd) worst = std::max(worst, std::abs(opt.state()[1][i] - ref.v[i]));
  }
  EXPECT_LE(worst, 1e-6) << to_string(kind);
  // Every tensor moved (none skipped), the decayed zero tensor too.
  const std::vector<float> start = random_floats(n, 1);
  for (const ParamTensor& t : layout.tensors())
    EXPECT_NE(std::memcmp(params.data() + t.offset, start.data() + t.offset, t.numel * 4), 0)
        << to_string(kind) << " " << t.name;
}

// The whole-buffer update, and one of [lo, hi) on a copy of the same start: after kSteps the
// range's params and state are bit-identical to the whole update's, the rest untouched.
void expect_range_equals_part(OptimizerKind kind, size_t lo, size_t hi) {
  const ModelConfig cfg = small_model();
  const ParamLayout layout(cfg);
  const size_t n = layout.total();
  const std::vector<float> start = random_floats(n, 2);
  std::vector<float> whole = start, part = start;
  CpuBackend<float> backend(1);
  Optimizer all(backend, layout, config_of(kind), whole.data(), ShardRanges::whole(n),
                Precision::Fp32);
  Optimizer some(backend, layout, config_of(kind), part.data() + lo, ShardRanges({{lo, hi}}),
                 Precision::Fp32);
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<float> grad = random_floats(n, 200 + t);
    all.step(grad.data(), kLr, kGradScale);
    some.step(grad.data() + lo, kLr, kGradScale);
  }
  const std::string what =
      to_string(kind) + " [" + std::to_string(lo) + ", " + std::to_string(hi) + ")";
  EXPECT_EQ(std::memcmp(part.data() + lo, whole.data() + lo, (hi - lo) * 4), 0) << what;
  EXPECT_EQ(std::memcmp(part.data(), start.data(), lo * 4), 0) << what;
  EXPECT_EQ(std::memcmp(part.data() + hi, start.data() + hi, (n - hi) * 4), 0) << what;
  for (size_t b = 0; b < all.state().size(); ++b)
    EXPECT_EQ(std::memcmp(some.state()[b], all.state()[b] + lo, (hi - lo) * 4), 0) << what;
  EXPECT_EQ(some.bytes(), (hi - lo) * 4 * all.state().size());
}

}  // namespace

TEST(Optimizer, AdamWMatchesDoubleReference) { expect_matches_reference(OptimizerKind::AdamW); }
TEST(Optimizer, SgdMatchesDoubleReference) { expect_matches_reference(OptimizerKind::Sgd); }
TEST(Optimizer, LambMatchesDoubleReference) { expect_matches_reference(OptimizerKind::Lamb); }

// Ranges that cut tensors (and 16-float vectors) anywhere: elementwise kinds.
TEST(Optimizer, RangeUpdateIsThatPartOfTheWholeUpdate) {
  const size_t n = ParamLayout(small_model()).total();
  for (OptimizerKind kind : {OptimizerKind::AdamW, OptimizerKind::Sgd}) {
    expect_range_equals_part(kind, 1001, n - 777);
    expect_range_equals_part(kind, 0, 37);
    expect_range_equals_part(kind, 5, 5);  // an empty range
  }
}

// LAMB needs whole tensors for its norms without a group to sum over: a range of whole tensors.
TEST(Optimizer, LambRangeOfWholeTensorsIsThatPartOfTheWholeUpdate) {
  const ParamLayout layout(small_model());
  const std::vector<ParamTensor>& t = layout.tensors();
  expect_range_equals_part(OptimizerKind::Lamb, t[3].offset, t[9].offset);
  expect_range_equals_part(OptimizerKind::Lamb, t[0].offset, t[2].offset);
}

// bf16 / fp16 parameters: the master holds exactly what an fp32 run's parameters hold, and the
// range of params holds round_to(master) after every step; params outside the range untouched.
TEST(Optimizer, MasterWeightsAreFp32AndParamsTheirRounding) {
  const ModelConfig cfg = small_model();
  const ParamLayout layout(cfg);
  const size_t n = layout.total(), lo = 333, hi = n - 100;
  for (Precision precision : {Precision::Bf16, Precision::Fp16})
    for (OptimizerKind kind : {OptimizerKind::AdamW, OptimizerKind::Sgd, OptimizerKind::Lamb}) {
      const std::string what = to_string(precision) + " " + to_string(kind);
      const std::vector<float> start = random_floats(n, 3);
      std::vector<float> fp32 = start, low = start;
      CpuBackend<float> backend(1);
      // LAMB over a range cutting tensors would need a dp group: whole buffer for it.
      const size_t a = kind == OptimizerKind::Lamb ? 0 : lo,
                   b = kind == OptimizerKind::Lamb ? n : hi;
      const ShardRanges range({{a, b}});
      Optimizer reference(backend, layout, config_of(kind), fp32.data() + a, range,
                          Precision::Fp32);
      Optimizer opt(backend, layout, config_of(kind), low.data() + a, range, precision);
      ASSERT_TRUE(opt.separate_master());
      ASSERT_NE(opt.master(), low.data() + a);
      EXPECT_EQ(std::memcmp(opt.master(), start.data() + a, (b - a) * 4), 0) << what;
      EXPECT_EQ(opt.bytes(), (b - a) * 4 * (opt.state().size() + 1)) << what;
      for (int t = 1; t <= kSteps; ++t) {
        const std::vector<float> grad = random_floats(n, 300 + t);
        reference.step(grad.data() + a, kLr, kGradScale);
        opt.step(grad.data() + a, kLr, kGradScale);
        ASSERT_EQ(std::memcmp(opt.master(), fp32.data() + a, (b - a) * 4), 0)
            << what << " step " << t;
        size_t wrong = 0;
        for (size_t i = a; i < b; ++i) wrong += low[i] != round_to(opt.master()[i - a], precision);
        EXPECT_EQ(wrong, 0u) << what << " step " << t;
        EXPECT_EQ(std::memcmp(low.data(), start.data(), a * 4), 0) << what;
        EXPECT_EQ(std::memcmp(low.data() + b, start.data() + b, (n - b) * 4), 0) << what;
      }
      // The rounding did something: the values are not all representable in the low precision.
      EXPECT_NE(std::memcmp(low.data() + a, fp32.data() + a, (b - a) * 4), 0) << what;
    }
}

TEST(Optimizer, Fp32MasterIsTheParamsThemselves) {
  const ParamLayout layout(small_model());
  std::vector<float> params(layout.total(), 0.5f);
  CpuBackend<float> backend(1);
  Optimizer opt(backend, layout, config_of(OptimizerKind::AdamW), params.data() + 10,
                ShardRanges({{10, 100}}), Precision::Fp32);
  EXPECT_FALSE(opt.separate_master());
  EXPECT_EQ(opt.master(), params.data() + 10);
  EXPECT_EQ(opt.bytes(), 90u * 4 * 2);
  EXPECT_THROW(Optimizer(backend, layout, config_of(OptimizerKind::Sgd), params.data() + 10,
                         ShardRanges({{10, layout.total() + 1}}), Precision::Fp32),
               Error);
}

TEST(Optimizer, NamesKindsAndTheirState) {
  EXPECT_EQ(parse_optimizer("lamb"), OptimizerKind::Lamb);
  EXPECT_EQ(to_string(parse_optimizer("sgd")), "sgd");
  EXPECT_EQ(state_names(OptimizerKind::AdamW), (std::vector<std::string>{"adam_m", "adam_v"}));
  EXPECT_EQ(state_names(OptimizerKind::Lamb), (std::vector<std::string>{"adam_m", "adam_v"}));
  EXPECT_EQ(state_names(OptimizerKind::Sgd), std::vector<std::string>{"momentum"});
  try {
    parse_optimizer("adam");
    ADD_FAILURE() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("'adamw', 'sgd' or 'lamb', not 'adam'"), std::string::npos)
        << e.what();
  }
}

// The backend's new ops in double (the gradient-check instantiation) against their formulas:
// same operations in the same order, so equal to ~1 ulp of double.
TEST(Optimizer, BackendOpsInDoubleFollowTheirFormulas) {
  const size_t n = 37;
  CpuBackend<double> be(1);
  std::mt19937_64 gen(4);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> p(n), g(n), buf(n), m(n), v(n);
  for (size_t i = 0; i < n; ++i) p[i] = dist(gen), g[i] = dist(gen), buf[i] = dist(gen);
  std::vector<double> rp = p, rbuf = buf;
  const Segment whole[] = {{0, n, true}};
  be.sgd_momentum(p.data(), g.data(), buf.data(), whole, 0.1f, 0.9f, 0.01f, 0.5f, {});
  for (size_t i = 0; i < n; ++i) {
    rbuf[i] = double(0.9f) * rbuf[i] + g[i] * 0.5;
    rp[i] -= double(0.1f) * (rbuf[i] + double(0.01f) * rp[i]);
    EXPECT_NEAR(buf[i], rbuf[i], 1e-15);
    EXPECT_NEAR(p[i], rp[i], 1e-15);
  }
  double sums[2];
  const int t = 2;
  be.lamb_moments(p.data(), g.data(), m.data(), v.data(), whole, 1.0f, 0.9f, 0.95f, 1e-8f, 0.1f, t,
                  0.5f, sums);
  double pp = 0.0, uu = 0.0;
  std::vector<double> u(n);
  for (size_t i = 0; i < n; ++i) {
    const double gi = g[i] * 0.5;
    const double mi = (1 - double(0.9f)) * gi, vi = (1 - double(0.95f)) * gi * gi;
    EXPECT_NEAR(m[i], mi, 1e-15);
    EXPECT_NEAR(v[i], vi, 1e-15);
    u[i] = mi / (1 - std::pow(double(0.9f), t)) /
               (std::sqrt(vi / (1 - std::pow(double(0.95f), t))) + double(1e-8f)) +
           double(0.1f) * p[i];
    pp += p[i] * p[i];
    uu += u[i] * u[i];
  }
  EXPECT_NEAR(sums[0], pp, 1e-13 * pp);
  EXPECT_NEAR(sums[1], uu, 1e-13 * uu);
  rp = p;
  const float lr = 0.25f;
  be.lamb_update(p.data(), m.data(), v.data(), whole, &lr, 0.9f, 0.95f, 1e-8f, 0.1f, t);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(p[i], rp[i] - 0.25 * u[i], 1e-14);
}
