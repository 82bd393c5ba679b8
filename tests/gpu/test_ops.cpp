// Every Backend op of CudaBackend<float> against CpuBackend<float> and CpuBackend<double> on the
// same fresh random inputs, forward and backward, in each kernel set (cudnn, cuda) and GEMM math.
// Outputs that an op overwrites are poisoned with NaN before it runs; outputs it accumulates into
// start from random values. Error: ||gpu - ref||_2 / ||ref||_2.
// Tolerances:
//   fp32                1e-5 (float rounding over sums of a few hundred terms, in another order)
//   bf16/fp16 GEMM math 1e-5 against the CPU run on operands rounded by round_to: the same
//                       products, exactly, summed in fp32 (the CPU's bf16 emulation)
//   tf32 GEMM math      5e-3 (10-bit mantissa operands, ~2^-11 relative each)
//   cuDNN attention     2e-2 in bf16, 4e-3 in fp16 (q, k, v, P and the gradients in bf16 / fp16)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>

#include "gpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/runtime/error.hpp"

namespace mpitrain {
namespace {

using gpu_testing::DeviceInts;
using gpu_testing::DeviceVec;
using gpu_testing::random_floats;
using gpu_testing::rel_l2;
using Outputs = std::vector<std::vector<double>>;

struct Config {
  const char* name;
  KernelSet kernels;
  GemmMath math;
};
const Config kCudnnFp32{"cudnn/fp32", KernelSet::Cudnn, GemmMath::Fp32};
const Config kCudaFp32{"cuda/fp32", KernelSet::Cuda, GemmMath::Fp32};
const Config kCudnnBf16{"cudnn/bf16", KernelSet::Cudnn, GemmMath::Bf16};
const Config kCudnnFp16{"cudnn/fp16", KernelSet::Cudnn, GemmMath::Fp16};
const Config kCudaBf16{"cuda/bf16", KernelSet::Cuda, GemmMath::Bf16};
const Config kCudnnTf32{"cudnn/tf32", KernelSet::Cudnn, GemmMath::Tf32};

CudaOptions options(const Config& c) {
  CudaOptions o;
  o.kernels = c.kernels;
  o.math = c.math;
  o.workspace_bytes = size_t{256} << 20;
  return o;
}

// The test's tensors on one backend: host vectors for the CPU backends, device memory for the GPU.
template <typename T>
class Buffers {
 public:
  using value_type = T;
  virtual ~Buffers() = default;
  virtual T* in(const std::vector<float>& v) = 0;  // a copy of v
  virtual T* out(size_t n) = 0;                    // NaN-filled
  virtual std::vector<double> read(const T* p, size_t n) = 0;
  virtual const int32_t* ints(const std::vector<int32_t>& v) = 0;
};

template <typename T>
class HostBuffers final : public Buffers<T> {
 public:
  T* in(const std::vector<float>& v) override {
    return keep_.emplace_back(v.begin(), v.end()).data();
  }
  T* out(size_t n) override {
    return keep_.emplace_back(n, std::numeric_limits<T>::quiet_NaN()).data();
  }
  std::vector<double> read(const T* p, size_t n) override { return {p, p + n}; }
  const int32_t* ints(const std::vector<int32_t>& v) override {
    return ints_.emplace_back(v).data();
  }

 private:
  std::deque<std::vector<T>> keep_;
  std::deque<std::vector<int32_t>> ints_;
};

class GpuBuffers final : public Buffers<float> {
 public:
  explicit GpuBuffers(CudaBackend<float>& be) : be_(be) {}
  float* in(const std::vector<float>& v) override {
    return keep_.emplace_back(std::make_unique<DeviceVec>(be_, v))->get();
  }
  float* out(size_t n) override {
    auto& d = keep_.emplace_back(std::make_unique<DeviceVec>(be_, n));
    d->poison();
    return d->get();
  }
  std::vector<double> read(const float* p, size_t n) override {
    std::vector<float> host(n);
    be_.to_host(host.data(), p, n * sizeof(float));
    return {host.begin(), host.end()};
  }
  const int32_t* ints(const std::vector<int32_t>& v) override {
    return ints_.emplace_back(std::make_unique<DeviceInts>(be_, v))->get();
  }

 private:
  CudaBackend<float>& be_;
  std::deque<std::unique_ptr<DeviceVec>> keep_;
  std::deque<std::unique_ptr<DeviceInts>> ints_;
};

// op(backend, buffers) -> its outputs. Runs it on both CPU backends and on the GPU in each
// configuration; every output of the GPU must be within tol of both CPU results. With
// `no_fallback`, an op that ran a CUDA kernel instead of cuDNN / cuBLASLt fails the test (the
// norms only print it: cuDNN's norm engines are used "where they fit", fp32 may not).
template <class Op>
void compare(const std::string& what, Op&& op, const std::vector<Config>& configs, double tol,
             bool no_fallback = true) {
  CpuBackend<float> cpu_f(2);
  HostBuffers<float> hf;
  const Outputs ref_f = op(cpu_f, hf);
  CpuBackend<double> cpu_d(2);
  HostBuffers<double> hd;
  const Outputs ref_d = op(cpu_d, hd);
  for (const Config& c : configs) {
    CudaBackend<float> gpu(options(c));
    GpuBuffers hg(gpu);
    const Outputs out = op(gpu, hg);
    ASSERT_EQ(out.size(), ref_d.size());
    for (size_t i = 0; i < out.size(); ++i) {
      EXPECT_LT(rel_l2(out[i], ref_d[i]), tol)
          << what << " output " << i << ", " << c.name << " vs CpuBackend<double>";
      EXPECT_LT(rel_l2(out[i], ref_f[i]), tol)
          << what << " output " << i << ", " << c.name << " vs CpuBackend<float>";
    }
    for (const std::string& f : gpu.fallbacks()) {
      if (no_fallback)
        ADD_FAILURE() << what << ", " << c.name << ": " << f;
      else
        std::printf("note: %s, %s: %s\n", what.c_str(), c.name, f.c_str());
    }
  }
}

const std::vector<Config> kFp32Configs{kCudnnFp32, kCudaFp32};
constexpr double kTol = 1e-5;

// ---- matmul -------------------------------------------------------------------------------------

// A parameter gradient's values before a backward: random to add to, NaN to be written over.
std::vector<float> start_values(size_t n, uint64_t seed, GradWrite write) {
  if (write == GradWrite::Add) return random_floats(n, seed);
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// out = x W^T + b, then dx, dW (+=), db (+=). With p = bf16/fp16 the CPU backends get the
// operands rounded by round_to (their emulation of that GEMM math) and the GPU the raw values,
// which it must round itself; db (a plain column sum, no GEMM) is then left out.
// GradWrite::Overwrite: dW and db start as NaN, which must not reach them.
auto matmul_op(int N, int IC, int OC, bool bias, bool dinp, Precision p,
               GradWrite write = GradWrite::Add) {
  return [=](auto& be, auto& m) -> Outputs {
    constexpr bool cpu = !std::is_same_v<std::decay_t<decltype(be)>, CudaBackend<float>>;
    const Precision round = cpu ? p : Precision::Fp32;
    const std::vector<float> x = random_floats(size_t(N) * IC, 1),
                             w = random_floats(size_t(OC) * IC, 2), b = random_floats(OC, 3),
                             dy = random_floats(size_t(N) * OC, 4),
                             dw0 = start_values(size_t(OC) * IC, 5, write),
                             db0 = start_values(OC, 6, write);
    auto* X = m.in(x);
    auto* W = m.in(w);
    auto* DY = m.in(dy);
    be.round_to(X, x.size(), round);
    be.round_to(W, w.size(), round);
    be.round_to(DY, dy.size(), round);
    auto* B = bias ? m.in(b) : nullptr;
    auto* out = m.out(size_t(N) * OC);
    be.matmul_forward(out, X, W, B, N, IC, OC);
    auto* dx = dinp ? m.out(size_t(N) * IC) : nullptr;
    auto* dw = m.in(dw0);
    auto* db = bias ? m.in(db0) : nullptr;
    be.matmul_backward(dx, dw, db, DY, X, W, N, IC, OC, write);
    Outputs o{m.read(out, size_t(N) * OC), m.read(dw, dw0.size())};
    if (dinp) o.push_back(m.read(dx, size_t(N) * IC));
    if (bias && p == Precision::Fp32) o.push_back(m.read(db, OC));
    return o;
  };
}

TEST(GpuOps, MatmulFp32) {
  compare("matmul overwriting dW and db",
          matmul_op(144, 320, 640, true, true, Precision::Fp32, GradWrite::Overwrite), kFp32Configs,
          kTol);
  compare("matmul", matmul_op(144, 320, 640, true, true, Precision::Fp32), kFp32Configs, kTol);
  compare("matmul odd shape", matmul_op(100, 72, 56, false, true, Precision::Fp32), kFp32Configs,
          kTol);
  compare("matmul no dinp", matmul_op(96, 64, 200, true, false, Precision::Fp32), kFp32Configs,
          kTol);
}

TEST(GpuOps, MatmulBf16MatchesRoundedOperands) {
  // the GPU rounds the operands itself; the CPU reference gets them rounded by round_to
  compare("matmul bf16", matmul_op(144, 320, 640, true, true, Precision::Bf16),
          {kCudnnBf16, kCudaBf16}, kTol);
  compare("matmul fp16", matmul_op(100, 72, 56, true, true, Precision::Fp16), {kCudnnFp16}, kTol);
}

TEST(GpuOps, MatmulBf16OnRawFp32Inputs) {
  // without the CPU rounding: bf16 operand error, ~2^-9 per operand
  const auto gpu_op = matmul_op(144, 320, 640, true, true, Precision::Fp32);
  CpuBackend<double> cpu(2);
  HostBuffers<double> hd;
  const Outputs ref = gpu_op(cpu, hd);
  for (const Config& c : {kCudnnBf16, kCudaBf16, kCudnnTf32}) {
    CudaBackend<float> gpu(options(c));
    GpuBuffers hg(gpu);
    const Outputs out = gpu_op(gpu, hg);
    const double tol = c.math == GemmMath::Tf32 ? 5e-3 : 2e-2;
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_LT(rel_l2(out[i], ref[i]), tol) << c.name << " " << i;
    EXPECT_GT(rel_l2(out[0], ref[0]), 1e-7) << c.name << ": reduced precision should show";
  }
}

// ---- embeddings, norms, pointwise, RoPE ---------------------------------------------------------

TEST(GpuOps, Embedding) {
  const int B = 2, T = 72, C = 96, V = 60;
  for (const auto& shard : {std::tuple{0, V, true}, std::tuple{16, 24, false}}) {
    const int v0 = std::get<0>(shard), Vl = std::get<1>(shard);
    const bool with_wpe = std::get<2>(shard);
    compare(
        "embedding",
        [=](auto& be, auto& m) -> Outputs {
          std::vector<int32_t> tok(B * T);
          for (int n = 0; n < B * T; ++n)
            tok[n] = (n * 7 + n / 5) % V;  // repeats, in and out of range
          auto* wte = m.in(random_floats(size_t(Vl) * C, 1));
          auto* wpe = with_wpe ? m.in(random_floats(size_t(T) * C, 2)) : nullptr;
          auto* out = m.out(size_t(B) * T * C);
          const int32_t* t = m.ints(tok);
          be.embedding_forward(out, t, wte, wpe, B, T, C, v0, Vl);
          auto* dwte = m.in(random_floats(size_t(Vl) * C, 3));
          auto* dwpe = with_wpe ? m.in(random_floats(size_t(T) * C, 4)) : nullptr;
          be.embedding_backward(dwte, dwpe, m.in(random_floats(size_t(B) * T * C, 5)), t, B, T, C,
                                v0, Vl);
          Outputs o{m.read(out, size_t(B) * T * C), m.read(dwte, size_t(Vl) * C)};
          if (with_wpe) o.push_back(m.read(dwpe, size_t(T) * C));
          return o;
        },
        kFp32Configs, kTol);
  }
}

auto norm_op(bool layer, int N, int C) {
  return [=](auto& be, auto& m) -> Outputs {
    using T = typename std::decay_t<decltype(m)>::value_type;
    auto* x = m.in(random_floats(size_t(N) * C, 1, -2.0f, 3.0f));
    auto* w = m.in(random_floats(C, 2, 0.5f, 1.5f));
    auto* b = m.in(random_floats(C, 3));
    auto* out = m.out(size_t(N) * C);
    auto* mean = m.out(N);
    auto* rstd = m.out(N);
    auto* dy = m.in(random_floats(size_t(N) * C, 4));
    auto* dx = m.in(random_floats(size_t(N) * C, 5));  // accumulated into
    auto* dw = m.in(random_floats(C, 6));
    auto* db = m.in(random_floats(C, 7));
    gpu_testing::norm_forward_backward<std::decay_t<decltype(be)>, T*, const T*, T>(
        be, layer, out, mean, rstd, x, w, b, dy, dx, dw, db, N, C, T(1e-5));
    Outputs o{m.read(out, size_t(N) * C), m.read(rstd, N), m.read(dx, size_t(N) * C),
              m.read(dw, C)};
    if (layer) {
      o.push_back(m.read(mean, N));
      o.push_back(m.read(db, C));
    }
    return o;
  };
}

TEST(GpuOps, LayerNorm) {
  compare("layernorm", norm_op(true, 144, 320), kFp32Configs, kTol, false);
  compare("layernorm odd", norm_op(true, 37, 100), kFp32Configs, kTol, false);
}

TEST(GpuOps, RmsNorm) {
  compare("rmsnorm", norm_op(false, 144, 320), kFp32Configs, kTol, false);
  compare("rmsnorm odd", norm_op(false, 37, 100), kFp32Configs, kTol, false);
}

TEST(GpuOps, Pointwise) {
  const int N = 144, F = 640;
  const size_t n = size_t(N) * F;
  compare(
      "add, gelu, swiglu",
      [=](auto& be, auto& m) -> Outputs {
        auto* a = m.in(random_floats(n, 1, -4.0f, 4.0f));
        auto* b = m.in(random_floats(n, 2));
        auto* sum = m.out(n);
        be.add(sum, a, b, n);
        auto* g = m.out(n);
        be.gelu_forward(g, a, n);
        auto* dg = m.out(n);
        be.gelu_backward(dg, a, b, n);
        auto* in2 = m.in(random_floats(2 * n, 3, -4.0f, 4.0f));
        auto* s = m.out(n);
        be.swiglu_forward(s, in2, N, F);
        auto* ds = m.out(2 * n);
        be.swiglu_backward(ds, in2, b, N, F);
        return {m.read(sum, n), m.read(g, n), m.read(dg, n), m.read(s, n), m.read(ds, 2 * n)};
      },
      kFp32Configs, kTol);
}

TEST(GpuOps, Rope) {
  const int B = 2, T = 72, NH = 4, NKV = 2, hs = 80;
  const size_t n = size_t(B) * T * (NH + 2 * NKV) * hs;
  compare(
      "rope",
      [=](auto& be, auto& m) -> Outputs {
        using Tv = typename std::decay_t<decltype(m)>::value_type;
        auto* q = m.in(random_floats(n, 1));
        be.rope_forward(q, B, T, NH, NKV, hs, Tv(10000));
        auto* d = m.in(random_floats(n, 2));
        be.rope_backward(d, B, T, NH, NKV, hs, Tv(10000));
        return {m.read(q, n), m.read(d, n)};
      },
      kFp32Configs, kTol);
}

// The scaled frequencies (rope_freqs.hpp), Llama 3's and YaRN's: the kernel's table is the
// CPU's, and yarn's attention factor multiplies cos and sin both ways.
TEST(GpuOps, RopeScaledFrequencies) {
  const int B = 1, T = 300, NH = 2, NKV = 1, hs = 128;
  const size_t n = size_t(B) * T * (NH + 2 * NKV) * hs;
  for (const char* spec : {"llama3:factor=32,low=1,high=4,orig=256", "yarn:factor=4,orig=256"}) {
    const RopeFreqs rope(500000.0, parse_rope_scaling(spec));
    compare(
        spec,
        [=](auto& be, auto& m) -> Outputs {
          auto* q = m.in(random_floats(n, 1));
          be.rope_forward(q, B, T, NH, NKV, hs, rope);
          auto* d = m.in(random_floats(n, 2));
          be.rope_backward(d, B, T, NH, NKV, hs, rope);
          return {m.read(q, n), m.read(d, n)};
        },
        kFp32Configs, kTol);
  }
}

// Qwen3's per-head q/k RMSNorm: forward, and backward in place (weight gradients accumulate).
TEST(GpuOps, QkNorm) {
  const int N = 150, NH = 4, NKV = 2, hs = 80;
  const size_t n = size_t(N) * (NH + 2 * NKV) * hs;
  compare(
      "qk norm",
      [=](auto& be, auto& m) -> Outputs {
        using T = typename std::decay_t<decltype(m)>::value_type;
        auto* x = m.in(random_floats(n, 1, -2.0f, 3.0f));
        auto* wq = m.in(random_floats(hs, 2, 0.5f, 1.5f));
        auto* wk = m.in(random_floats(hs, 3, 0.5f, 1.5f));
        auto* out = m.out(n);
        auto* rstd = m.out(size_t(N) * (NH + NKV));
        be.qk_norm_forward(out, rstd, x, wq, wk, N, NH, NKV, hs, T(1e-6));
        auto* d = m.in(random_floats(n, 4));
        auto* dwq = m.in(random_floats(hs, 5));
        auto* dwk = m.in(random_floats(hs, 6));
        be.qk_norm_backward(d, dwq, dwk, x, wq, wk, rstd, N, NH, NKV, hs);
        return {m.read(out, n), m.read(rstd, size_t(N) * (NH + NKV)), m.read(d, n), m.read(dwq, hs),
                m.read(dwk, hs)};
      },
      kFp32Configs, kTol);
}

// ---- attention ----------------------------------------------------------------------------------

// Backward is given forward's output, as the model passes it.
// scale: the factor on q k^T (0: 1/sqrt(hs)); window: the sliding window (0 none); doc_period:
// document masking, a document starting at each t with (t + 7 b) % doc_period == 0 (0: none).
auto attention_op(int B, int T, int NH, int NKV, int hs, double scale = 0, int window = 0,
                  int doc_period = 0) {
  return [=](auto& be, auto& m) -> Outputs {
    const size_t QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs, P = size_t(B) * NH * T * T;
    std::vector<int32_t> starts(size_t(B) * T);  // host memory, as the model passes them
    for (int b = 0; b < B; ++b)
      for (int t = 0, start = 0; t < T; ++t) {
        if (doc_period > 0 && (t + 7 * b) % doc_period == 0) start = t;
        starts[size_t(b) * T + t] = start;
      }
    const AttentionMask mask(window, doc_period > 0 ? starts.data() : nullptr);
    auto* qkv = m.in(random_floats(size_t(B) * T * QKV, 1, -2.0f, 2.0f));
    auto* out = m.out(size_t(B) * T * A);
    auto* probs = m.out(P);
    const double s = scale != 0 ? scale : 1 / std::sqrt(double(hs));
    be.attention_forward(out, probs, qkv, B, T, NH, NKV, hs, s, mask);
    auto* dout = m.in(random_floats(size_t(B) * T * A, 2));
    auto* dqkv = m.out(size_t(B) * T * QKV);
    auto* scratch = m.out(P);
    be.attention_backward(dqkv, scratch, dout, qkv, out, probs, B, T, NH, NKV, hs, s, mask);
    return {m.read(out, size_t(B) * T * A), m.read(dqkv, size_t(B) * T * QKV)};
  };
}

TEST(GpuOps, AttentionKernels) {
  // fp32 math: our flash-style kernels in both kernel sets (cuDNN has no fp32 attention)
  compare("attention gqa", attention_op(2, 72, 4, 2, 80), kFp32Configs, kTol);
  compare("attention mha", attention_op(2, 128, 4, 4, 64), kFp32Configs, kTol);
  compare("attention hs 128", attention_op(1, 40, 2, 1, 128), kFp32Configs, kTol);
  compare("attention hs 24", attention_op(2, 33, 3, 3, 24), kFp32Configs, kTol);
  compare("attention gpt2 scale 1/3", attention_op(2, 72, 4, 4, 64, 1.0 / 3), kFp32Configs, kTol);
  // sliding windows: within a 32-key tile, across tiles (some wholly out of it)
  compare("attention window 5", attention_op(2, 72, 4, 2, 80, 0, 5), kFp32Configs, kTol);
  compare("attention window 40", attention_op(1, 128, 4, 4, 64, 0, 40), kFp32Configs, kTol);
  // documents: shorter than a tile, across tiles, and with a window
  compare("attention documents 9", attention_op(2, 72, 4, 2, 80, 0, 0, 9), kFp32Configs, kTol);
  compare("attention documents 45", attention_op(2, 128, 4, 4, 64, 0, 0, 45), kFp32Configs, kTol);
  compare("attention documents 45, window 20", attention_op(2, 128, 4, 4, 64, 0, 20, 45),
          kFp32Configs, kTol);
}

TEST(GpuOps, AttentionCudnn) {
  compare("cuDNN attention gqa bf16", attention_op(2, 72, 4, 2, 80), {kCudnnBf16}, 2e-2);
  compare("cuDNN attention mha bf16", attention_op(2, 128, 4, 4, 64), {kCudnnBf16}, 2e-2);
  compare("cuDNN attention mha fp16", attention_op(2, 128, 4, 4, 64), {kCudnnFp16}, 4e-3);
  // gpt2 unscaled, block 3: scores / 4 (the by-value scale scalar reaches the graph)
  compare("cuDNN attention scale 1/4", attention_op(2, 128, 4, 4, 64, 0.25), {kCudnnBf16}, 2e-2);
  // bf16 math with our kernels: attention stays fp32 there
  compare("attention cuda/bf16", attention_op(2, 72, 4, 2, 80), {kCudaBf16}, kTol);
  // a sliding window shorter than the sequence: the CUDA kernel in the cuDNN kernel set (said)
  compare("cuDNN set, window 40", attention_op(2, 128, 4, 4, 64, 0, 40), {kCudnnBf16}, kTol);
  // document masking: likewise
  compare("cuDNN set, documents 45", attention_op(2, 128, 4, 4, 64, 0, 0, 45), {kCudnnBf16}, kTol);
}

TEST(GpuOps, AttentionBackwardReadsTheForwardOutput) {
  // Both kernel sets take the output given instead of recomputing the forward: a NaN output
  // reaches the q and k gradients (through D = rowsum(dout * out)).
  const int B = 1, T = 64, NH = 2, hs = 64;
  const size_t QKV = size_t(3 * NH) * hs, A = size_t(NH) * hs, N = size_t(B) * T;
  for (const Config& c : {kCudaFp32, kCudnnBf16}) {
    CudaBackend<float> gpu(options(c));
    DeviceVec qkv(gpu, random_floats(N * QKV, 1, -2.0f, 2.0f)), dout(gpu, random_floats(N * A, 2));
    DeviceVec out(gpu, N * A), probs(gpu, gpu.attention_state_size(B, T, NH));
    DeviceVec scratch(gpu, gpu.attention_state_size(B, T, NH)), dqkv(gpu, N * QKV);
    gpu.attention_forward(out.get(), probs.get(), qkv.get(), B, T, NH, NH, hs,
                          1 / std::sqrt(double(hs)), 0);
    out.poison();
    gpu.attention_backward(dqkv.get(), scratch.get(), dout.get(), qkv.get(), out.get(), probs.get(),
                           B, T, NH, NH, hs, 1 / std::sqrt(double(hs)), 0);
    const std::vector<float> g = dqkv.download();
    EXPECT_TRUE(std::isnan(g[0]) && std::isnan(g[NH * hs]))
        << c.name << ": q " << g[0] << ", k " << g[NH * hs];
    EXPECT_TRUE(gpu.fallbacks().empty()) << c.name << ": " << gpu.fallbacks().front();
  }
}

TEST(GpuOps, Fp32MathStoresFp32Only) {
  // 2-byte storage comes with the GEMM math of that type (test_two_byte_ops.cpp); fp32 math
  // refuses it.
  CudaBackend<float> gpu(options(kCudaFp32));
  EXPECT_TRUE(gpu.stores(Precision::Fp32));
  EXPECT_FALSE(gpu.stores(Precision::Bf16));
  EXPECT_FALSE(gpu.stores(Precision::Fp16));
  EXPECT_THROW(gpu.alloc(16, Precision::Bf16), Error);
  DeviceVec x(gpu, random_floats(16, 1));
  const Buf<float> full = gpu.alloc(16, Precision::Fp32);  // fp32: alloc(n)
  gpu.convert(full, x.get(), 16);                          // fp32 to fp32: a copy
  std::vector<float> back(16);
  gpu.download(back.data(), full, 16);
  EXPECT_EQ(back, x.download());
  gpu.free(full.data());
}

// ---- cross-entropy ------------------------------------------------------------------------------

// The three phases on tp simulated ranks (column shards of Vp), reductions between them done
// on the host as the model's all-reduces would; outputs: row_max, stats, losses, total, dlogits.
// unscored: every fifth target kUnscored (--mask-boundary-loss).
auto cross_entropy_op(int N, int V, int Vp, int tp, float dloss, bool unscored = false) {
  return [=](auto& be, auto& m) -> Outputs {
    using T = typename std::decay_t<decltype(m)>::value_type;
    const int Vl = Vp / tp;
    const std::vector<float> logits = random_floats(size_t(N) * Vp, 1, -5.0f, 5.0f);
    std::vector<int32_t> tgt(N);
    for (int n = 0; n < N; ++n) tgt[n] = unscored && n % 5 == 0 ? kUnscored : (n * 37) % V;
    const int32_t* t = m.ints(tgt);
    std::vector<T*> shard(tp);
    for (int r = 0; r < tp; ++r) {
      std::vector<float> s(size_t(N) * Vl);
      for (int n = 0; n < N; ++n)
        std::memcpy(&s[size_t(n) * Vl], &logits[size_t(n) * Vp + size_t(r) * Vl],
                    Vl * sizeof(float));
      shard[r] = m.in(s);
    }
    std::vector<float> mx(N, -INFINITY);
    for (int r = 0; r < tp; ++r) {
      auto* rm = m.out(N);
      be.ce_row_max(shard[r], rm, N, Vl, r * Vl, V);
      const std::vector<double> h = m.read(rm, N);
      for (int n = 0; n < N; ++n) mx[n] = std::max(mx[n], static_cast<float>(h[n]));
    }
    auto* row_max = m.in(mx);
    std::vector<float> st(2 * N, 0.0f);
    for (int r = 0; r < tp; ++r) {
      auto* s = m.out(2 * N);
      be.ce_stats(shard[r], row_max, t, s, N, Vl, r * Vl, V);
      const std::vector<double> h = m.read(s, 2 * N);
      for (int i = 0; i < 2 * N; ++i) st[i] += static_cast<float>(h[i]);
    }
    auto* stats = m.in(st);
    Outputs o{m.read(row_max, N), m.read(stats, 2 * N)};
    for (int r = 0; r < tp; ++r) {
      auto* losses = m.out(N);
      const double total =
          be.ce_loss(shard[r], row_max, stats, t, losses, N, Vl, r * Vl, V, T(dloss));
      o.push_back(m.read(losses, N));
      o.push_back({total});
      if (dloss != 0.0f) o.push_back(m.read(shard[r], size_t(N) * Vl));
    }
    return o;
  };
}

TEST(GpuOps, CrossEntropy) {
  compare("cross-entropy", cross_entropy_op(144, 1000, 1024, 1, 1.0f / 144), kFp32Configs, kTol);
  compare("cross-entropy tp 2", cross_entropy_op(144, 1000, 1024, 2, 1.0f / 144), kFp32Configs,
          kTol);
  compare("cross-entropy no grad", cross_entropy_op(50, 300, 384, 1, 0.0f), kFp32Configs, kTol);
  compare("cross-entropy tp 2, unscored rows",
          cross_entropy_op(144, 1000, 1024, 2, 1.0f / 144, true), kFp32Configs, kTol);
}

// ---- memory ops, rounding, optimizer ------------------------------------------------------------

// [0, n) cut into `count` segments of about equal size, every other one decayed, with a gap of
// `gap` elements after each.
std::vector<Segment> segments_of(size_t n, size_t count, size_t gap) {
  std::vector<Segment> segments;
  for (size_t k = 0; k < count; ++k) {
    const size_t at = k * n / count, end = (k + 1) * n / count;
    segments.push_back({at, end - at - std::min(gap, end - at), k % 2 == 1});
  }
  return segments;
}

TEST(GpuOps, ZeroCopyScaleSumSquares) {
  const size_t n = 100003;
  compare(
      "zero, copy, scale, sum_squares",
      [=](auto& be, auto& m) -> Outputs {
        using T = typename std::decay_t<decltype(m)>::value_type;
        auto* x = m.in(random_floats(n, 1));
        auto* y = m.out(n);
        be.copy(y, x, n);
        be.scale(y, T(0.75), n);
        auto* z = m.in(random_floats(n, 2));
        be.zero(z + 10, n - 20);
        const Segment whole[] = {{0, n}};
        const double ss = be.sum_squares(x, whole);
        // 1500 segments: two tables (launches) of the CUDA backend; some of several blocks
        const double many = be.sum_squares(x, segments_of(n, 1500, 3));
        const double few = be.sum_squares(x, segments_of(n, 3, 100));
        return {m.read(y, n), m.read(z, n), {ss, many, few}};
      },
      kFp32Configs, 1e-7);  // elementwise or double sums: float rounding of single operations only
}

TEST(GpuOps, RoundToIsExact) {
  // bit for bit as the CPU's round_to: ties to even, fp16 overflow to inf, subnormals kept
  const std::vector<float> x = gpu_testing::rounding_cases();
  for (Precision p : {Precision::Bf16, Precision::Fp16}) {
    CpuBackend<float> cpu(1);
    std::vector<float> ref = x;
    cpu.round_to(ref.data(), ref.size(), p);
    CudaBackend<float> gpu(options(kCudaFp32));
    DeviceVec d(gpu, x);
    gpu.round_to(d.get(), x.size(), p);
    const std::vector<float> out = d.download();
    int mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (std::memcmp(&out[i], &ref[i], sizeof(float)) != 0 && ++mismatches <= 5)
        ADD_FAILURE() << to_string(p) << " x=" << x[i] << ": gpu " << out[i] << " cpu " << ref[i];
  }
}

TEST(GpuOps, Optimizers) {
  const size_t n = 50001;
  compare(
      "adamw, sgd, lamb",
      [=](auto& be, auto& m) -> Outputs {
        auto* p = m.in(random_floats(n, 1));
        auto* g = m.in(random_floats(n, 2, -0.1f, 0.1f));
        auto* mm = m.in(random_floats(n, 3, -0.01f, 0.01f));
        auto* v = m.in(random_floats(n, 4, 0.0f, 1e-4f));
        // 5 segments (decayed or not) with gaps; the first and last of several CUDA blocks
        const std::vector<Segment> segments = segments_of(n, 5, 7);
        for (int t = 1; t <= 3; ++t)
          be.adamw(p, g, mm, v, segments, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t, 0.5f, {});
        auto* p2 = m.in(random_floats(n, 5));
        auto* buf = m.in(random_floats(n, 6, -0.01f, 0.01f));
        for (int t = 1; t <= 3; ++t)
          be.sgd_momentum(p2, g, buf, segments, 1e-2f, 0.9f, 0.01f, 2.0f, {});
        auto* p3 = m.in(random_floats(n, 7));
        auto* m3 = m.in(random_floats(n, 8, -0.01f, 0.01f));
        auto* v3 = m.in(random_floats(n, 9, 0.0f, 1e-4f));
        std::vector<double> sums(2 * segments.size());
        const std::vector<float> lr = {1e-3f, 2e-3f, 3e-3f, 4e-3f, 5e-3f};
        be.lamb_moments(p3, g, m3, v3, segments, 1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 2, 1.0f,
                        sums.data());
        be.lamb_update(p3, m3, v3, segments, lr.data(), 0.9f, 0.999f, 1e-6f, 0.01f, 2);
        return {m.read(p, n),  m.read(mm, n), m.read(v, n),  m.read(p2, n), m.read(buf, n),
                m.read(p3, n), m.read(m3, n), m.read(v3, n), sums};
      },
      kFp32Configs, 1e-6);  // elementwise float updates (+ double sums)
}

// ---- memory arenas ------------------------------------------------------------------------------

TEST(GpuMemory, ArenasSealAndReport) {
  CudaBackend<float> gpu(options(kCudaFp32));
  gpu.set_alloc_kind(cuda::MemoryKind::Params);
  float* a = gpu.alloc(1000);
  float* b = gpu.alloc(cuda::MemoryKind::Grads, 1000);
  std::vector<float> host(1000, 1.0f);
  gpu.to_host(host.data(), a, sizeof(float) * 1000);  // alloc zero-fills
  for (float v : host) ASSERT_EQ(v, 0.0f);
  gpu.seal_memory();
  gpu.free(a);
  float* again = gpu.alloc(1000);  // the freed top of the block is reused
  EXPECT_EQ(again, a);
  EXPECT_THROW(gpu.alloc(size_t{1} << 30), Error) << "a sealed arena does not grow";
  const std::string report = gpu.memory_report();
  EXPECT_NE(report.find("params"), std::string::npos) << report;
  EXPECT_NE(report.find("workspace"), std::string::npos) << report;
  gpu.free(again);
  gpu.free(b);
}

}  // namespace
}  // namespace mpitrain
