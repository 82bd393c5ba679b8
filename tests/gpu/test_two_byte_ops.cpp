// Every Backend op on compute tensors stored in 2 bytes (bf16, fp16): CudaBackend (GEMM math of
// that type, both kernel sets) against CpuBackend<float>(1, precision), its 2-byte path, on the
// same inputs — the same 2-byte values on both sides, uploaded through the backends' own
// conversion (round to nearest even). Both compute in fp32 and round what they write once, so a
// 2-byte output differs only where the fp32 results (other summation orders, CUDA's expf) fall
// on either side of a rounding boundary, by one unit in the last place there.
// Bounds, ||gpu - cpu||_2 / ||cpu||_2:
//   2-byte outputs    one ulp of every element: 2^-7 = 7.8e-3 in bf16, 2^-10 = 9.8e-4 in fp16
//                     (the largest relative ulp of a normal value); outputs computed from an
//                     output of a previous op (attention backward from forward's out and lse)
//                     two ulps
//   fp32 outputs      (parameter gradients, statistics, lse, losses) 1e-5: exact products of
//                     2-byte values summed in fp32 in another order
//   cuDNN attention   2e-2 in bf16, 4e-3 in fp16: it rounds P and the gradients to bf16 / fp16
//                     inside (as test_ops.cpp's bound), the CPU keeps them fp32
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test_util.hpp"
#include "mpitrain/backend/cpu_backend.hpp"

namespace mpitrain {
namespace {

using gpu_testing::random_floats;
using gpu_testing::rel_l2;
using Outputs = std::vector<std::vector<double>>;

// The tensors of one run on one backend: compute tensors in the run's storage type, statistics
// and parameter gradients in fp32; all freed with it.
class Tensors {
 public:
  Tensors(Backend<float>& be, Precision storage) : be_(be), storage_(storage) {}
  ~Tensors() {
    for (void* p : owned_) be_.free(p);
    for (int32_t* p : ids_) be_.free_ids(p);
  }
  Tensors(const Tensors&) = delete;
  Tensors& operator=(const Tensors&) = delete;

  Buf<float> in(const std::vector<float>& v) { return fill(be_.alloc(v.size(), storage_), v); }
  Buf<float> out(size_t n) { return fill(be_.alloc(n, storage_), nan(n)); }
  float* stat_in(const std::vector<float>& v) {
    return fill(be_.alloc(v.size(), Precision::Fp32), v).full();
  }
  float* stat_out(size_t n) { return fill(be_.alloc(n, Precision::Fp32), nan(n)).full(); }
  const int32_t* ids(const std::vector<int32_t>& v) {
    int32_t* p = ids_.emplace_back(be_.alloc_ids(v.size()));
    be_.upload_ids(p, v.data(), v.size());
    return p;
  }
  std::vector<double> read(CBuf<float> b, size_t n) {
    std::vector<float> host(n);
    be_.download(host.data(), b, n);
    return {host.begin(), host.end()};
  }

 private:
  static std::vector<float> nan(size_t n) {
    return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
  }
  Buf<float> fill(Buf<float> b, const std::vector<float>& v) {
    owned_.push_back(b.data());
    be_.upload(b, v.data(), v.size());
    return b;
  }
  Backend<float>& be_;
  Precision storage_;
  std::vector<void*> owned_;
  std::vector<int32_t*> ids_;
};

GemmMath math_of(Precision p) { return p == Precision::Bf16 ? GemmMath::Bf16 : GemmMath::Fp16; }

double ulp_bound(Precision p) { return p == Precision::Bf16 ? 0x1p-7 : 0x1p-10; }

constexpr double kFp32Tol = 1e-5;

// An output of an op and its bound.
struct Check {
  const char* name;
  double tol;
};

// op(backend, tensors) -> outputs, in the order of `checks`. Runs on the CPU's 2-byte path and on
// the GPU in each kernel set with 2-byte tensors of the same type; every output within its bound.
template <class Op>
void compare(const std::string& what, Precision p, const std::vector<Check>& checks, Op&& op,
             std::initializer_list<KernelSet> kernel_sets = {KernelSet::Cudnn, KernelSet::Cuda}) {
  SCOPED_TRACE(what + " " + to_string(p));
  CpuBackend<float> cpu(1, p);
  ASSERT_TRUE(cpu.stores(p));
  Outputs ref;
  {
    Tensors t(cpu, p);
    ref = op(cpu, t);
  }
  ASSERT_EQ(ref.size(), checks.size());
  for (KernelSet k : kernel_sets) {
    CudaOptions o;
    o.kernels = k;
    o.math = math_of(p);
    o.workspace_bytes = size_t{256} << 20;
    CudaBackend<float> gpu(o);
    ASSERT_TRUE(gpu.stores(p));
    Tensors t(gpu, p);
    const Outputs out = op(gpu, t);
    ASSERT_EQ(out.size(), ref.size());
    for (size_t i = 0; i < out.size(); ++i)
      EXPECT_LT(rel_l2(out[i], ref[i]), checks[i].tol)
          << checks[i].name << ", kernels " << to_string(k);
    // cuBLASLt and cuDNN attention must take the 2-byte tensors; cuDNN's norms where they fit
    for (const std::string& f : gpu.fallbacks()) {
      if (f.find("cuBLASLt") != std::string::npos || f.find("attention") != std::string::npos)
        ADD_FAILURE() << what << ", " << to_string(k) << ": " << f;
      else
        std::printf("note: %s, %s: %s\n", what.c_str(), to_string(k).c_str(), f.c_str());
    }
  }
}

const Precision kTwoByte[] = {Precision::Bf16, Precision::Fp16};

TEST(GpuTwoByteOps, Matmul) {
  for (Precision p : kTwoByte) {
    const double u = ulp_bound(p);
    for (const bool bias : {true, false}) {
      const int N = bias ? 144 : 100, IC = bias ? 320 : 72, OC = bias ? 640 : 56;
      compare("matmul", p, {{"out", u}, {"dinp", u}, {"dweight", kFp32Tol}, {"dbias", kFp32Tol}},
              [=](Backend<float>& be, Tensors& t) -> Outputs {
                const Buf<float> x = t.in(random_floats(size_t(N) * IC, 1));
                const Buf<float> w = t.in(random_floats(size_t(OC) * IC, 2));
                const Buf<float> b = bias ? t.in(random_floats(OC, 3)) : nullptr;
                const Buf<float> dy = t.in(random_floats(size_t(N) * OC, 4));
                const Buf<float> out = t.out(size_t(N) * OC), dx = t.out(size_t(N) * IC);
                float* dw = t.stat_in(random_floats(size_t(OC) * IC, 5));  // accumulated into
                float* db = t.stat_in(random_floats(OC, 6));
                be.matmul_forward(out, x, w, b, N, IC, OC);
                be.matmul_backward(dx, dw, bias ? db : nullptr, dy, x, w, N, IC, OC,
                                   GradWrite::Add);
                return {t.read(out, size_t(N) * OC), t.read(dx, size_t(N) * IC),
                        t.read(dw, size_t(OC) * IC), t.read(db, OC)};
              });
    }
  }
}

TEST(GpuTwoByteOps, Embedding) {
  const int B = 2, T = 72, C = 96, V = 60;
  for (Precision p : kTwoByte) {
    compare("embedding", p, {{"out", ulp_bound(p)}, {"dwte", kFp32Tol}, {"dwpe", kFp32Tol}},
            [=](Backend<float>& be, Tensors& t) -> Outputs {
              std::vector<int32_t> tok(B * T);
              for (int n = 0; n < B * T; ++n) tok[n] = (n * 7 + n / 5) % V;
              const int32_t* ids = t.ids(tok);
              const Buf<float> wte = t.in(random_floats(size_t(V) * C, 1));
              const Buf<float> wpe = t.in(random_floats(size_t(T) * C, 2));
              const Buf<float> out = t.out(size_t(B) * T * C);
              be.embedding_forward(out, ids, wte, wpe, B, T, C, 0, V);
              float* dwte = t.stat_in(random_floats(size_t(V) * C, 3));
              float* dwpe = t.stat_in(random_floats(size_t(T) * C, 4));
              be.embedding_backward(dwte, dwpe, t.in(random_floats(size_t(B) * T * C, 5)), ids, B,
                                    T, C, 0, V);
              return {t.read(out, size_t(B) * T * C), t.read(dwte, size_t(V) * C),
                      t.read(dwpe, size_t(T) * C)};
            });
  }
}

TEST(GpuTwoByteOps, Norms) {
  const int N = 144, C = 320;
  for (Precision p : kTwoByte) {
    for (const bool layer : {true, false}) {
      const double u = ulp_bound(p);
      compare(layer ? "layernorm" : "rmsnorm", p,
              {{"out", u},
               {"rstd", kFp32Tol},
               {"mean", kFp32Tol},
               {"dinp", u},
               {"dw", kFp32Tol},
               {"db", kFp32Tol}},
              [=](Backend<float>& be, Tensors& t) -> Outputs {
                const Buf<float> x = t.in(random_floats(size_t(N) * C, 1, -2.0f, 3.0f));
                const Buf<float> w = t.in(random_floats(C, 2, 0.5f, 1.5f));
                const Buf<float> b = t.in(random_floats(C, 3));
                const Buf<float> out = t.out(size_t(N) * C);
                float* mean = t.stat_in(std::vector<float>(N, 0.0f));
                float* rstd = t.stat_out(N);
                const Buf<float> dy = t.in(random_floats(size_t(N) * C, 4));
                const Buf<float> dx = t.in(random_floats(size_t(N) * C, 5));  // accumulated into
                float* dw = t.stat_in(random_floats(C, 6));
                float* db = t.stat_in(random_floats(C, 7));
                gpu_testing::norm_forward_backward<Backend<float>, Buf<float>, CBuf<float>, float>(
                    be, layer, out, mean, rstd, x, w, b, dy, dx, dw, db, N, C, 1e-5f);
                return {t.read(out, size_t(N) * C), t.read(rstd, N), t.read(mean, N),
                        t.read(dx, size_t(N) * C),  t.read(dw, C),   t.read(db, C)};
              });
    }
  }
}

TEST(GpuTwoByteOps, PointwiseAndRope) {
  const int N = 144, F = 640, B = 2, T = 72, NH = 4, NKV = 2, hs = 80;
  const size_t n = size_t(N) * F, q = size_t(B) * T * (NH + 2 * NKV) * hs;
  for (Precision p : kTwoByte) {
    const double u = ulp_bound(p);
    compare("pointwise, rope", p,
            {{"add", u},
             {"gelu", u},
             {"gelu backward", u},
             {"swiglu", u},
             {"swiglu backward", u},
             {"rope", u},
             {"rope backward", u}},
            [=](Backend<float>& be, Tensors& t) -> Outputs {
              const Buf<float> a = t.in(random_floats(n, 1, -4.0f, 4.0f));
              const Buf<float> b = t.in(random_floats(n, 2));
              const Buf<float> sum = t.out(n), g = t.out(n), dg = t.out(n), s = t.out(n);
              be.add(sum, a, b, n);
              be.gelu_forward(g, a, n);
              be.gelu_backward(dg, a, b, n);
              const Buf<float> in2 = t.in(random_floats(2 * n, 3, -4.0f, 4.0f));
              const Buf<float> ds = t.out(2 * n);
              be.swiglu_forward(s, in2, N, F);
              be.swiglu_backward(ds, in2, b, N, F);
              const Buf<float> r = t.in(random_floats(q, 4)), dr = t.in(random_floats(q, 5));
              be.rope_forward(r, B, T, NH, NKV, hs, 10000.0f);
              be.rope_backward(dr, B, T, NH, NKV, hs, 10000.0f);
              return {t.read(sum, n),    t.read(g, n), t.read(dg, n), t.read(s, n),
                      t.read(ds, 2 * n), t.read(r, q), t.read(dr, q)};
            });
  }
}

// Backward is given forward's output and log-sum-exp, as the model passes them.
auto attention_op(int B, int T, int NH, int NKV, int hs) {
  return [=](Backend<float>& be, Tensors& t) -> Outputs {
    const size_t QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs;
    const size_t S = be.attention_state_size(B, T, NH);
    const Buf<float> qkv = t.in(random_floats(size_t(B) * T * QKV, 1, -2.0f, 2.0f));
    const Buf<float> out = t.out(size_t(B) * T * A);
    float* state = t.stat_out(S);
    be.attention_forward(out, state, qkv, B, T, NH, NKV, hs, 1 / std::sqrt(double(hs)), 0);
    const Buf<float> dout = t.in(random_floats(size_t(B) * T * A, 2));
    const Buf<float> dqkv = t.out(size_t(B) * T * QKV);
    float* scratch = t.stat_out(S);
    be.attention_backward(dqkv, scratch, dout, qkv, out, state, B, T, NH, NKV, hs,
                          1 / std::sqrt(double(hs)), 0);
    return {t.read(out, size_t(B) * T * A), t.read(dqkv, size_t(B) * T * QKV)};
  };
}

TEST(GpuTwoByteOps, AttentionKernels) {
  for (Precision p : kTwoByte) {
    const double u = ulp_bound(p);
    compare("attention gqa", p, {{"out", u}, {"dqkv", 2 * u}}, attention_op(2, 72, 4, 2, 80),
            {KernelSet::Cuda});
    compare("attention hs 24", p, {{"out", u}, {"dqkv", 2 * u}}, attention_op(2, 33, 3, 3, 24),
            {KernelSet::Cuda});
  }
}

TEST(GpuTwoByteOps, AttentionCudnnInPlace) {
  compare("cuDNN attention", Precision::Bf16, {{"out", 2e-2}, {"dqkv", 2e-2}},
          attention_op(2, 128, 4, 2, 64), {KernelSet::Cudnn});
  compare("cuDNN attention", Precision::Fp16, {{"out", 4e-3}, {"dqkv", 4e-3}},
          attention_op(2, 128, 4, 4, 64), {KernelSet::Cudnn});
}

TEST(GpuTwoByteOps, CrossEntropy) {
  const int N = 144, V = 1000, Vl = 1024;
  for (Precision p : kTwoByte) {
    compare("cross-entropy", p,
            {{"row max", kFp32Tol},
             {"stats", kFp32Tol},
             {"losses", kFp32Tol},
             {"dlogits", ulp_bound(p)}},
            [=](Backend<float>& be, Tensors& t) -> Outputs {
              std::vector<int32_t> tgt(N);
              for (int n = 0; n < N; ++n) tgt[n] = (n * 37) % V;
              const int32_t* ids = t.ids(tgt);
              const Buf<float> logits = t.in(random_floats(size_t(N) * Vl, 1, -5.0f, 5.0f));
              float* row_max = t.stat_out(N);
              float* stats = t.stat_out(2 * N);
              float* losses = t.stat_out(N);
              be.ce_row_max(logits, row_max, N, Vl, 0, V);
              be.ce_stats(logits, row_max, ids, stats, N, Vl, 0, V);
              const double total =
                  be.ce_loss(logits, row_max, stats, ids, losses, N, Vl, 0, V, 1.0f / N);
              std::vector<double> l = t.read(losses, N);
              l.push_back(total);
              return {t.read(row_max, N), t.read(stats, 2 * N), l, t.read(logits, size_t(N) * Vl)};
            });
  }
}

TEST(GpuTwoByteOps, ConvertRoundsAsTheHost) {
  // device convert() bit for bit as the host's round_to: ties to even, fp16 overflow to inf,
  // subnormals kept; and back to fp32 exactly
  const std::vector<float> x = gpu_testing::rounding_cases();
  for (Precision p : kTwoByte) {
    CudaOptions o;
    o.math = math_of(p);
    CudaBackend<float> gpu(o);
    Tensors t(gpu, p);
    float* wide = t.stat_in(x);
    const Buf<float> narrow = t.out(x.size());
    gpu.convert(narrow, wide, x.size());
    float* back = t.stat_out(x.size());
    gpu.convert(back, narrow, x.size());
    const std::vector<double> got = t.read(back, x.size());
    int mismatches = 0;
    for (size_t i = 0; i < x.size(); ++i)
      if (static_cast<float>(got[i]) != round_to(x[i], p) && ++mismatches <= 5)
        ADD_FAILURE() << to_string(p) << " x=" << x[i] << ": gpu " << got[i] << " host "
                      << round_to(x[i], p);
  }
}

TEST(GpuTwoByteOps, OptimizersRoundTheComputeCopy) {
  // AdamW and SGD given a 2-byte compute copy write each updated element as convert() rounds
  // the updated fp32 master, in the same pass
  const size_t n = 70001;
  const Segment segments[] = {{0, 30000, true}, {30000, n - 30000, false}};
  for (Precision p : kTwoByte) {
    CudaOptions o;
    o.math = math_of(p);
    CudaBackend<float> gpu(o);
    Tensors t(gpu, p);
    float* g = t.stat_in(random_floats(n, 2, -0.1f, 0.1f));
    for (const bool adamw : {true, false}) {
      float* master = t.stat_in(random_floats(n, 1));
      float* m = t.stat_in(random_floats(n, 3, -0.01f, 0.01f));
      float* v = t.stat_in(random_floats(n, 4, 0.0f, 1e-4f));
      const Buf<float> copy = t.out(n);
      if (adamw)
        gpu.adamw(master, g, m, v, segments, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1, 0.5f, copy);
      else
        gpu.sgd_momentum(master, g, m, segments, 1e-2f, 0.9f, 0.01f, 2.0f, copy);
      const Buf<float> converted = t.out(n);
      gpu.convert(converted, master, n);
      float* a = t.stat_out(n);
      float* b = t.stat_out(n);
      gpu.convert(a, copy, n);
      gpu.convert(b, converted, n);
      EXPECT_EQ(t.read(a, n), t.read(b, n)) << to_string(p) << (adamw ? " adamw" : " sgd");
    }
  }
}

// MiB in use in one arena, from memory_report()'s table ("  <kind> reserved in-use peak").
double in_use_mib(const std::string& report, const std::string& kind) {
  const size_t at = report.find("  " + kind + " ");
  if (at == std::string::npos) return -1.0;
  double reserved = 0, used = -1.0;
  std::sscanf(report.c_str() + at + 2 + kind.size(), "%lf %lf", &reserved, &used);
  return used;
}

TEST(GpuTwoByteOps, StorageFollowsTheGemmMath) {
  CudaOptions o;
  o.kernels = KernelSet::Cuda;
  o.math = GemmMath::Bf16;
  CudaBackend<float> bf16(o);
  EXPECT_TRUE(bf16.stores(Precision::Bf16));
  EXPECT_FALSE(bf16.stores(Precision::Fp16));
  EXPECT_THROW(bf16.alloc(16, Precision::Fp16), Error);
  o.math = GemmMath::Fp32;
  CudaBackend<float> fp32(o);
  EXPECT_FALSE(fp32.stores(Precision::Bf16));
  EXPECT_THROW(fp32.alloc(16, Precision::Bf16), Error);
  // a 2-byte tensor takes 2 bytes of its arena: 1 Mi elements, 2 MiB of the activations
  const double before = in_use_mib(bf16.memory_report(), "activations");
  const Buf<float> x = bf16.alloc(size_t{1} << 20, Precision::Bf16);
  EXPECT_NEAR(in_use_mib(bf16.memory_report(), "activations") - before, 2.0, 0.05)
      << bf16.memory_report();
  const std::vector<float> v = random_floats(size_t{1} << 20, 1);
  bf16.upload(x, v.data(), v.size());
  std::vector<float> back(v.size());
  bf16.download(back.data(), x, v.size());
  for (size_t i = 0; i < v.size(); i += 4099)
    ASSERT_EQ(back[i], round_to(v[i], Precision::Bf16)) << i;
  bf16.free(x.data());
}

}  // namespace
}  // namespace mpitrain
