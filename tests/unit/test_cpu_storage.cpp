// CpuBackend<float> on 2-byte compute tensors (bf16, fp16): every op against
//   (1) the emulated path, bit for bit: float containers holding the same rounded inputs, the
//       same backend (constructed for the precision), the op, its outputs rounded (round_to);
//   (2) CpuBackend<double> on the same rounded inputs, normwise: max|x - ref| / max|ref| <= u_p +
//       2 (k + 16) 2^-24. u_p = 2^-8 (bf16) / 2^-11 (fp16) is the rounding of a 2-byte output
//       (0 for fp32 outputs); k is the longest fp32 sum behind an output element (the `terms`
//       column below: K of a product, C of a norm, T and hs of attention), each adding at most
//       one fp32 rounding (2^-24) of the running sum, bounded by the sum of |terms|, which for
//       these random O(1) inputs is within a small factor of max|ref|: hence the factor 2; the 16
//       covers the handful of other roundings per element (exp_fast's ~2 ulp among them).
// Shapes: a small one, and ones spanning several staged blocks (kBlockElems = 2^18 elements:
// odd row sizes, partial last blocks, several sequences per block and a sequence larger than a
// block) and several GEMM tiles (kTileElems = 2^22: a large-vocabulary forward, a large-K dinp,
// tiles of 1024-wide rows, padded).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {
namespace {

using DVec = std::vector<double>;
using FVec = std::vector<float>;
using IVec = std::vector<int32_t>;

// n values uniform in [lo, hi), rounded to p.
FVec values(size_t n, uint64_t seed, Precision p, double lo = -1.0, double hi = 1.0) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  FVec v(n);
  for (float& x : v) x = round_to(static_cast<float>(dist(gen)), p);
  return v;
}

IVec ids(size_t n, uint64_t seed, int hi) {
  std::mt19937_64 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, hi - 1);
  IVec v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

// One output of an op: its values, whether it is a compute tensor (2-byte, rounded) and the
// length of the longest fp32 sum behind an element.
struct Out {
  std::string name;
  DVec v;
  bool rounded;
  double terms;
};

// The tensors of one run of an op on backend `be`: compute tensors stored as `storage`, read
// back rounded to `emulate` (the emulated path's round_to after the op; Fp32: as they are).
template <typename T>
class Run {
 public:
  using Scalar = T;
  Run(CpuBackend<T>& be, Precision storage, Precision emulate)
      : be_(be), storage_(storage), emulate_(emulate) {}
  ~Run() {
    for (void* p : owned_) be_.free(p);
  }
  CpuBackend<T>& be() { return be_; }

  Buf<T> tensor(const FVec& v) {
    Buf<T> b = be_.alloc(v.size(), storage_);
    owned_.push_back(b.data());
    const std::vector<T> host(v.begin(), v.end());
    be_.upload(b, host.data(), v.size());
    return b;
  }
  Buf<T> tensor(size_t n) { return tensor(FVec(n, 0.0f)); }
  T* array(const FVec& v) { return arrays_.emplace_back(v.begin(), v.end()).data(); }
  T* array(size_t n) { return arrays_.emplace_back(n, T(0)).data(); }

  // The emulated path's rounding of an op's output before the next op reads it (round_to).
  void round(Buf<T> b, size_t n) {
    if (emulate_ != Precision::Fp32 && b.full()) be_.round_to(b.full(), n, emulate_);
  }
  Out read(const std::string& name, CBuf<T> b, size_t n, double terms) {
    std::vector<T> host(n);
    be_.download(host.data(), b, n);
    DVec v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] =
          emulate_ == Precision::Fp32 ? host[i] : round_to(static_cast<float>(host[i]), emulate_);
    return {name, v, true, terms};
  }
  Out read(const std::string& name, const T* a, size_t n, double terms) {
    return {name, DVec(a, a + n), false, terms};
  }

 private:
  CpuBackend<T>& be_;
  Precision storage_, emulate_;
  std::vector<void*> owned_;
  std::vector<std::vector<T>> arrays_;
};

// An op: given a Run, fills its inputs (the same rounded values for every run) and returns its
// outputs. One generic lambda serves the float and the double backend.
struct Op {
  std::string name;
  std::function<std::vector<Out>(Run<float>&)> f;
  std::function<std::vector<Out>(Run<double>&)> d;
};
template <class Lambda>
Op make_op(std::string name, Lambda f) {
  return Op{std::move(name), f, f};
}

std::string first_difference(const DVec& a, const DVec& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(double)) != 0)
      return "first at " + std::to_string(i) + ": " + std::to_string(a[i]) + " vs " +
             std::to_string(b[i]);
  return "";
}

double unit_roundoff(Precision p) { return p == Precision::Bf16 ? 0x1p-8 : 0x1p-11; }

void check(const Op& op, Precision p) {
  SCOPED_TRACE(op.name + " in " + to_string(p));
  CpuBackend<float> be(2, p);
  CpuBackend<double> ref_be(2);
  Run<float> emulated(be, Precision::Fp32, p), half(be, p, Precision::Fp32);
  Run<double> reference(ref_be, Precision::Fp32, Precision::Fp32);
  const std::vector<Out> e = op.f(emulated), h = op.f(half), r = op.d(reference);
  ASSERT_EQ(e.size(), h.size());
  for (size_t i = 0; i < e.size(); ++i) {
    SCOPED_TRACE(e[i].name);
    ASSERT_EQ(e[i].v.size(), h[i].v.size());
    EXPECT_EQ(first_difference(h[i].v, e[i].v), "") << "2-byte vs emulated, bit for bit";
    const double bound = (e[i].rounded ? unit_roundoff(p) : 0.0) + 2 * (e[i].terms + 16) * 0x1p-24;
    EXPECT_LE(testing::rel_err(h[i].v, r[i].v), bound) << "against the double reference";
  }
}

// ---- the ops ------------------------------------------------------------------------------

struct MatShape {
  int N, IC, OC;
};

Op linear(MatShape s, Precision p, bool bias) {
  return make_op(
      "linear N=" + std::to_string(s.N) + " IC=" + std::to_string(s.IC) +
          " OC=" + std::to_string(s.OC) + (bias ? " +bias" : ""),
      [=](auto& run) {
        const size_t ni = size_t(s.N) * s.IC, nw = size_t(s.OC) * s.IC, no = size_t(s.N) * s.OC;
        auto inp = run.tensor(values(ni, 1, p)), w = run.tensor(values(nw, 2, p));
        auto b = bias ? run.tensor(values(s.OC, 3, p)) : decltype(inp)();
        auto dout = run.tensor(values(no, 4, p)), out = run.tensor(no), dinp = run.tensor(ni);
        auto* dw = run.array(values(nw, 5, Precision::Fp32));
        auto* db = run.array(values(s.OC, 6, Precision::Fp32));
        run.be().matmul_forward(out, inp, w, b, s.N, s.IC, s.OC);
        run.be().matmul_backward(dinp, dw, bias ? db : nullptr, dout, inp, w, s.N, s.IC, s.OC,
                                 GradWrite::Add);
        return std::vector<Out>{
            run.read("out", out, no, s.IC + 1), run.read("dinp", dinp, ni, s.OC),
            run.read("dweight", dw, nw, s.N + 1), run.read("dbias", db, s.OC, s.N + 1)};
      });
}

Op layernorm(int N, int C, Precision p) {
  return make_op("layernorm N=" + std::to_string(N) + " C=" + std::to_string(C), [=](auto& run) {
    const size_t n = size_t(N) * C;
    auto inp = run.tensor(values(n, 11, p)), w = run.tensor(values(C, 12, p)),
         b = run.tensor(values(C, 13, p)), out = run.tensor(n), dout = run.tensor(values(n, 14, p));
    auto dinp = run.tensor(values(n, 15, p));  // += onto it
    auto *mean = run.array(N), *rstd = run.array(N), *dw = run.array(C), *db = run.array(C);
    run.be().layernorm_forward(out, mean, rstd, inp, w, b, N, C, 1e-5);
    run.be().layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    return std::vector<Out>{run.read("out", out, n, 2 * C),   run.read("mean", mean, N, C),
                            run.read("rstd", rstd, N, 2 * C), run.read("dinp", dinp, n, 4 * C),
                            run.read("dw", dw, C, 2 * N),     run.read("db", db, C, N)};
  });
}

Op rmsnorm(int N, int C, Precision p) {
  return make_op("rmsnorm N=" + std::to_string(N) + " C=" + std::to_string(C), [=](auto& run) {
    const size_t n = size_t(N) * C;
    auto inp = run.tensor(values(n, 21, p)), w = run.tensor(values(C, 22, p)), out = run.tensor(n),
         dout = run.tensor(values(n, 23, p)), dinp = run.tensor(values(n, 24, p));
    auto *rstd = run.array(N), *dw = run.array(C);
    run.be().rmsnorm_forward(out, rstd, inp, w, N, C, 1e-5);
    run.be().rmsnorm_backward(dinp, dw, dout, inp, w, rstd, N, C);
    return std::vector<Out>{run.read("out", out, n, C), run.read("rstd", rstd, N, C),
                            run.read("dinp", dinp, n, 2 * C), run.read("dw", dw, C, N)};
  });
}

Op pointwise(size_t n, Precision p) {
  return make_op("add, gelu n=" + std::to_string(n), [=](auto& run) {
    auto a = run.tensor(values(n, 31, p, -4, 4)), b = run.tensor(values(n, 32, p)),
         sum = run.tensor(n), g = run.tensor(n), dg = run.tensor(n);
    run.be().add(sum, a, b, n);
    run.be().gelu_forward(g, a, n);
    run.be().gelu_backward(dg, a, b, n);
    return std::vector<Out>{run.read("add", sum, n, 1), run.read("gelu", g, n, 1),
                            run.read("gelu'", dg, n, 1)};
  });
}

Op swiglu(int N, int F, Precision p) {
  return make_op("swiglu N=" + std::to_string(N) + " F=" + std::to_string(F), [=](auto& run) {
    const size_t n = size_t(N) * F;
    auto inp = run.tensor(values(2 * n, 41, p, -4, 4)), dout = run.tensor(values(n, 42, p)),
         out = run.tensor(n), dinp = run.tensor(2 * n);
    run.be().swiglu_forward(out, inp, N, F);
    run.be().swiglu_backward(dinp, inp, dout, N, F);
    return std::vector<Out>{run.read("out", out, n, 1), run.read("dinp", dinp, 2 * n, 1)};
  });
}

struct AttnShape {
  int B, T, NH, NKV, hs;
};

std::string name(const char* op, AttnShape s) {
  return std::string(op) + " B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
         " NH=" + std::to_string(s.NH) + " NKV=" + std::to_string(s.NKV) +
         " hs=" + std::to_string(s.hs);
}

Op rope(AttnShape s, Precision p) {
  return make_op(name("rope", s), [=](auto& run) {
    const size_t n = size_t(s.B) * s.T * (s.NH + 2 * s.NKV) * s.hs;
    auto qkv = run.tensor(values(n, 51, p, -2, 2)), dqkv = run.tensor(values(n, 52, p));
    run.be().rope_forward(qkv, s.B, s.T, s.NH, s.NKV, s.hs, 10000.0);
    run.be().rope_backward(dqkv, s.B, s.T, s.NH, s.NKV, s.hs, 10000.0);
    return std::vector<Out>{run.read("forward", qkv, n, 2), run.read("backward", dqkv, n, 2)};
  });
}

// Qwen3's per-head q/k RMSNorm on qkv rows (N = B T): forward, backward in place
Op qk_norm(AttnShape s, Precision p) {
  return make_op(name("qk norm", s), [=](auto& run) {
    const int N = s.B * s.T;
    const size_t n = size_t(N) * (s.NH + 2 * s.NKV) * s.hs, nr = size_t(N) * (s.NH + s.NKV);
    auto inp = run.tensor(values(n, 55, p, -2, 2)), wq = run.tensor(values(s.hs, 56, p)),
         wk = run.tensor(values(s.hs, 57, p)), out = run.tensor(n),
         d = run.tensor(values(n, 58, p));
    auto *rstd = run.array(nr), *dwq = run.array(s.hs), *dwk = run.array(s.hs);
    run.be().qk_norm_forward(out, rstd, inp, wq, wk, N, s.NH, s.NKV, s.hs, 1e-6);
    run.be().qk_norm_backward(d, dwq, dwk, inp, wq, wk, rstd, N, s.NH, s.NKV, s.hs);
    return std::vector<Out>{run.read("out", out, n, s.hs), run.read("rstd", rstd, nr, s.hs),
                            run.read("dinp", d, n, 2 * s.hs), run.read("dwq", dwq, s.hs, nr),
                            run.read("dwk", dwk, s.hs, nr)};
  });
}

// forward and backward; backward reads forward's output and row log-sum-exps (fp32); window:
// the sliding window (0 none)
Op attention(AttnShape s, Precision p, int window = 0) {
  const std::string what = name("attention", s) + " window=" + std::to_string(window);
  return make_op(what, [=](auto& run) {
    const size_t nq = size_t(s.B) * s.T * (s.NH + 2 * s.NKV) * s.hs,
                 no = size_t(s.B) * s.T * s.NH * s.hs,
                 np = run.be().attention_state_size(s.B, s.T, s.NH);
    auto qkv = run.tensor(values(nq, 53, p, -2, 2)), dout = run.tensor(values(no, 54, p)),
         out = run.tensor(no), dqkv = run.tensor(nq);
    auto *probs = run.array(np), *scratch = run.array(np);
    run.be().attention_forward(out, probs, qkv, s.B, s.T, s.NH, s.NKV, s.hs,
                               1 / std::sqrt(double(s.hs)), window);
    run.round(out, no);  // backward reads out (D = rowsum(dout * out)) as the model keeps it
    run.be().attention_backward(dqkv, scratch, dout, qkv, out, probs, s.B, s.T, s.NH, s.NKV, s.hs,
                                1 / std::sqrt(double(s.hs)), window);
    return std::vector<Out>{run.read("out", out, no, s.hs + 2 * s.T),
                            run.read("lse", probs, np, s.hs + s.T),
                            run.read("dqkv", dqkv, nq, 4 * (s.hs + s.T))};
  });
}

struct CeShape {
  int N, Vl, v0, V;
};

Op cross_entropy(CeShape s, Precision p, bool grad) {
  return make_op(
      "cross-entropy N=" + std::to_string(s.N) + " Vl=" + std::to_string(s.Vl) +
          " v0=" + std::to_string(s.v0) + " V=" + std::to_string(s.V) + (grad ? " +grad" : ""),
      [=](auto& run) {
        using T = typename std::decay_t<decltype(run)>::Scalar;
        const size_t n = size_t(s.N) * s.Vl;
        auto logits = run.tensor(values(n, 61, p, -6, 6));
        IVec targets = ids(s.N, 62, s.V);
        for (size_t i = 0; i < targets.size(); i += 3) targets[i] = kUnscored;  // the loss mask's
        auto *row_max = run.array(s.N), *stats = run.array(2 * s.N), *losses = run.array(s.N);
        run.be().ce_row_max(logits, row_max, s.N, s.Vl, s.v0, s.V);
        run.be().ce_stats(logits, row_max, targets.data(), stats, s.N, s.Vl, s.v0, s.V);
        const double total = run.be().ce_loss(logits, row_max, stats, targets.data(), losses, s.N,
                                              s.Vl, s.v0, s.V, grad ? T(1.0 / s.N) : T(0));
        return std::vector<Out>{
            run.read("row_max", row_max, s.N, 0), run.read("stats", stats, 2 * s.N, 4),
            run.read("losses", losses, s.N, 4), Out{"total", DVec{total}, false, s.N + 4.0},
            run.read("dlogits", logits, n, 4)};
      });
}

struct EmbShape {
  int B, T, C, v0, Vl;
};

Op embedding(EmbShape s, Precision p, bool wpe) {
  return make_op(
      "embedding B=" + std::to_string(s.B) + " T=" + std::to_string(s.T) +
          " C=" + std::to_string(s.C) + (wpe ? " +wpe" : ""),
      [=](auto& run) {
        const size_t n = size_t(s.B) * s.T * s.C;
        const IVec tokens = ids(size_t(s.B) * s.T, 71, s.v0 + s.Vl + 50);  // some not held
        auto wte = run.tensor(values(size_t(s.Vl) * s.C, 72, p));
        auto pe = wpe ? run.tensor(values(size_t(s.T) * s.C, 73, p)) : decltype(wte)();
        auto dout = run.tensor(values(n, 74, p)), out = run.tensor(n);
        auto *dwte = run.array(size_t(s.Vl) * s.C), *dwpe = run.array(size_t(s.T) * s.C);
        run.be().embedding_forward(out, tokens.data(), wte, pe, s.B, s.T, s.C, s.v0, s.Vl);
        run.be().embedding_backward(dwte, wpe ? dwpe : nullptr, dout, tokens.data(), s.B, s.T, s.C,
                                    s.v0, s.Vl);
        return std::vector<Out>{run.read("out", out, n, 1),
                                run.read("dwte", dwte, size_t(s.Vl) * s.C, s.B * s.T),
                                run.read("dwpe", dwpe, size_t(s.T) * s.C, s.B)};
      });
}

// ---- the tests ----------------------------------------------------------------------------

class CpuStorage : public ::testing::TestWithParam<Precision> {};

TEST_P(CpuStorage, LinearLayer) {
  const Precision p = GetParam();
  for (const bool bias : {true, false}) check(linear({7, 33, 65}, p, bias), p);
  check(linear({257, 129, 77}, p, true), p);
  // forward: the vocabulary in 2 tiles; dinp: K = 14500 in 2 chunks; dweight: 2 tiles of OC
  check(linear({300, 300, 14500}, p, true), p);
  check(linear({14500, 16, 301}, p, true), p);  // the rows in 2 tiles
  // tiles 1024 wide or more, their rows padded in the scratch (tile_ld): C's in forward, op(A)'s
  // in dinp (K = 2048 whole) and in dweight (A^T: OC's 2048 columns)
  check(linear({1024, 64, 2048}, p, false), p);
}

TEST_P(CpuStorage, Norms) {
  const Precision p = GetParam();
  for (const auto& [N, C] : {std::pair{3, 5}, {600, 1000}, {3000, 96}}) {
    check(layernorm(N, C, p), p);
    check(rmsnorm(N, C, p), p);
  }
}

TEST_P(CpuStorage, Pointwise) {
  const Precision p = GetParam();
  for (const size_t n : {size_t{13}, size_t{600007}}) check(pointwise(n, p), p);
  for (const auto& [N, F] : {std::pair{2, 7}, {300, 1001}}) check(swiglu(N, F, p), p);
}

TEST_P(CpuStorage, RopeAndAttention) {
  const Precision p = GetParam();
  // 32 sequences a block (3 blocks); one sequence larger than a block. Attention at 2 threads:
  // whole sequences widened (the first and last shapes: a head's two sequences per thread pass
  // a sequence of qkv), or one head's per thread (the second, GQA group 2).
  for (const AttnShape s : {AttnShape{2, 5, 2, 1, 4}, {70, 64, 4, 2, 16}, {2, 1100, 2, 1, 64}}) {
    check(rope(s, p), p);
    check(qk_norm(s, p), p);
    check(attention(s, p), p);
    check(attention(s, p, 3), p);  // a sliding window of 3 (Mistral's, short)
  }
}

TEST_P(CpuStorage, CrossEntropy) {
  const Precision p = GetParam();
  for (const bool grad : {true, false}) {
    check(cross_entropy({3, 17, 0, 17}, p, grad), p);
    check(cross_entropy({100, 5000, 2500, 7000}, p, grad), p);  // 3 pieces; padding in the 3rd
  }
}

TEST_P(CpuStorage, Embeddings) {
  const Precision p = GetParam();
  for (const bool wpe : {true, false}) {
    check(embedding({2, 3, 8, 5, 20}, p, wpe), p);
    check(embedding({12, 50, 1000, 100, 300}, p, wpe), p);  // 5 sequences a block
  }
}

INSTANTIATE_TEST_SUITE_P(, CpuStorage, ::testing::Values(Precision::Bf16, Precision::Fp16),
                         [](const auto& info) { return to_string(info.param); });

// ---- memory -------------------------------------------------------------------------------

TEST(CpuStorageMemory, WhatEachBackendStores) {
  CpuBackend<float> f(1);
  CpuBackend<double> d(1);
  for (const Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    EXPECT_TRUE(f.stores(p)) << to_string(p);
    EXPECT_EQ(d.stores(p), p == Precision::Fp32) << to_string(p);
  }
  EXPECT_THROW(d.alloc(4, Precision::Bf16), Error);
  EXPECT_THROW(CpuBackend<double>(1, Precision::Fp16), Error);
}

// host_scratch_bytes (the trainer's host_scratch_mib): the fp32 staging that a 2-byte product
// widens its operands and its output into, held from then on; fp32 products stage nothing.
TEST(CpuStorageMemory, HostScratchIsTheStagingHeld) {
  const int IC = 32, OC = 48;
  const auto product = [&](CpuBackend<float>& be, Precision p, int N) {
    const Buf<float> inp = be.alloc(size_t(N) * IC, p), weight = be.alloc(size_t(OC) * IC, p),
                     out = be.alloc(size_t(N) * OC, p);
    be.matmul_forward(out, inp, weight, nullptr, N, IC, OC);
    for (const Buf<float>& b : {inp, weight, out}) be.free(b.data());
  };
  CpuBackend<float> fp32(1), fp16(1, Precision::Fp16);  // fp16: the blocked sgemm on every CPU
  product(fp32, Precision::Fp32, 64);
  EXPECT_EQ(fp32.host_scratch_bytes(), 0u);
  EXPECT_EQ(fp16.host_scratch_bytes(), 0u);
  product(fp16, Precision::Fp16, 64);
  const size_t tiles = sizeof(float) * (64 * IC + OC * IC + 64 * OC);  // A, B and C in one tile
  const size_t held = fp16.host_scratch_bytes();
  EXPECT_GE(held, tiles);
  EXPECT_LE(held, tiles + 3 * 64);     // each slot rounded up to 64 bytes
  product(fp16, Precision::Fp16, 16);  // a smaller product: the slots keep their size
  EXPECT_EQ(fp16.host_scratch_bytes(), held);
}

TEST(CpuStorageMemory, AllocZeroCopyByElementSize) {
  CpuBackend<float> be(1);
  for (const Precision p : {Precision::Bf16, Precision::Fp16}) {
    const size_t n = 1001;
    Buf<float> a = be.alloc(n, p), b = be.alloc(n, p);
    EXPECT_EQ(a.dtype(), p);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ(a.half()[i], 0u);
    const FVec v = values(n, 81, p);
    be.upload(a, v.data(), n);
    be.copy(b, a, n);
    EXPECT_EQ(std::memcmp(a.data(), b.data(), 2 * n), 0);
    be.zero(b + 1, n - 2);  // by element: the first and last stay
    EXPECT_EQ(b.half()[0], a.half()[0]);
    EXPECT_EQ(b.half()[n - 1], a.half()[n - 1]);
    for (size_t i = 1; i + 1 < n; ++i) ASSERT_EQ(b.half()[i], 0u);
    EXPECT_THROW(be.copy(b, be.alloc(1, Precision::Fp32), 1), Error);
    be.free(a.data());
    be.free(b.data());
  }
}

// convert / upload / download between every pair of types: narrowing rounds to nearest even
// (fp16 overflowing to inf), widening is exact, bf16 <-> fp16 goes through the exact float.
TEST(CpuStorageMemory, ConvertBetweenAllTypes) {
  CpuBackend<float> be(2);
  const size_t n = 300001;  // parallel chunks
  FVec x = values(n, 91, Precision::Fp32, -3, 3);
  x[0] = 70000.0f;     // beyond fp16
  x[1] = 1.00390625f;  // halfway between two bf16 values: to even (1.0)
  x[2] = 1e-6f;        // an fp16 subnormal
  Buf<float> bf = be.alloc(n, Precision::Bf16), hf = be.alloc(n, Precision::Fp16),
             hb = be.alloc(n, Precision::Fp16);
  be.upload(bf, x.data(), n);
  be.upload(hf, x.data(), n);
  be.convert(hb, bf, n);
  FVec back(n), via(n);
  be.download(back.data(), bf, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], round_to(x[i], Precision::Bf16)) << i;
  EXPECT_EQ(back[1], 1.0f);
  be.download(back.data(), hf, n);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], round_to(x[i], Precision::Fp16)) << i;
  EXPECT_TRUE(std::isinf(back[0]));
  be.download(via.data(), hb, n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(via[i], round_to(round_to(x[i], Precision::Bf16), Precision::Fp16)) << i;
  FVec f32(n);
  be.convert(f32.data(), bf, n);
  be.download(back.data(), bf, n);
  EXPECT_EQ(f32, back);
  for (void* p : {bf.data(), hf.data(), hb.data()}) be.free(p);
}

// fp16 <-> fp32 in bulk (F16C's conversions where the build has them) give the bits of the
// scalar conversions of precision.hpp: every one of the 65536 fp16 patterns widened (a NaN
// stays a NaN), and narrowed: values around every rounding tie of the normal and subnormal
// ranges, the overflow edge (65504 stays, 65520 is inf), zeros, infinities and NaNs (the one
// quiet NaN with its sign), in every position of an 8-wide block and its tail.
TEST(CpuStorageMemory, Fp16InBulkHasTheScalarBits) {
  CpuBackend<float> be(2);
  const size_t all = 65536;
  Buf<float> h = be.alloc(all, Precision::Fp16);
  for (size_t i = 0; i < all; ++i) h.half()[i] = static_cast<uint16_t>(i);
  FVec wide(all);
  be.convert(wide.data(), h, all);
  for (size_t i = 0; i < all; ++i) {
    const float want = from_fp16_bits(static_cast<uint16_t>(i));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(wide[i])) << i;
    } else {
      ASSERT_EQ(std::memcmp(&wide[i], &want, sizeof want), 0) << "fp16 bits " << i;
    }
  }
  FVec x;
  for (size_t i = 0; i + 1 < all; ++i) {  // each pair of neighbours: both, and the tie between
    const float a = from_fp16_bits(static_cast<uint16_t>(i));
    const float b = from_fp16_bits(static_cast<uint16_t>(i + 1));
    if (std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b) || (i & 0x7fff) == 0x7fff)
      continue;
    const float mid = a + (b - a) / 2;
    x.insert(x.end(), {a, mid, std::nextafter(mid, a), std::nextafter(mid, b)});
  }
  x.insert(x.end(), {65504.0f, 65519.99f, 65520.0f, 1e9f, -1e9f, 0.0f, -0.0f, 1e-30f, -1e-30f,
                     INFINITY, -INFINITY, NAN, -NAN, 3.0f});
  const size_t n = x.size();
  Buf<float> narrow = be.alloc(n, Precision::Fp16);
  be.convert(narrow, x.data(), n);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(narrow.half()[i], to_fp16_bits(x[i])) << "float " << x[i] << " at " << i;
  for (void* p : {h.data(), narrow.data()}) be.free(p);
}

}  // namespace
}  // namespace mpitrain
