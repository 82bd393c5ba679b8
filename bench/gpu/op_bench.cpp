// GPU benchmark of the CUDA backend (bench/gpu/run.sh runs it):
//   1. the card's two ceilings: device-to-device copy bandwidth (bytes read + written) and
//      cuBLASLt's bf16 GEMM rate (8192^3, bf16 operands, fp32 accumulation and output);
//   2. each op of a GPT-2 small layer (B x T = 8 x 1024) against its floor =
//      max(FLOPs / GEMM rate, bytes / copy bandwidth), bytes = each input read once, each
//      output written once (what no implementation can avoid);
//   3. one training step (forward, backward, gradient norm, AdamW) of GPT-2 small (T = 1024) and
//      of a ~1B Llama-style model: ms, tokens/s and MFU = (6 N + 12 L d T) tokens/s / GEMM rate;
//   4. what only a GPU run can tell about cuDNN (printed, not judged): its version against the
//      one built with and the CUDA runtime's; per attention head size (16 ... 128, MHA and GQA)
//      and per fp32 norm width, whether an engine runs it or the CUDA kernel takes over, and the
//      first call's time (the plan is built) beside a later one's (cached).
// Times: CUDA events around each op, median of the repetitions after warm-up. Each result is
// printed (line-buffered) as it is measured: a run stopped at its time limit keeps what was done.
//
// Usage: op-bench [--kernels cudnn|cuda] [--math bf16|fp32|tf32] [--steps N] [--skip-llama]
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../src/backend/cuda/kernels.hpp"
#include "../../src/backend/cuda/lt_gemm.hpp"
#include "../bench_args.hpp"
#include "mpitrain/backend/cuda/check.hpp"
#include "mpitrain/backend/cuda/device.hpp"
#include "mpitrain/backend/cuda_backend.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/runtime/program.hpp"

using namespace mpitrain;

namespace {

struct Args {
  KernelSet kernels = KernelSet::Cudnn;
  GemmMath math = GemmMath::Bf16;
  int steps = 5;
  bool llama = true;
};

// Median time in ms of `reps` runs of f on the stream, after `warm` untimed ones.
double time_ms(cudaStream_t s, const std::function<void()>& f, int warm = 2, int reps = 7) {
  for (int i = 0; i < warm; ++i) f();
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CUDA_CHECK(cudaEventRecord(a, s));
    f();
    CUDA_CHECK(cudaEventRecord(b, s));
    CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Fills device memory with uniform values in [-scale, scale) (never zeros: see METHOD).
void fill_random(CudaBackend<float>& be, Buf<float> p, size_t n, float scale, uint64_t seed) {
  std::vector<float> host(std::min<size_t>(n, size_t{1} << 24));
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : host) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = scale * (static_cast<float>(x >> 40) / 8388608.0f - 1.0f);
  }
  for (size_t i = 0; i < n; i += host.size())
    be.upload(p + i, host.data(), std::min(host.size(), n - i));
}

struct Ceilings {
  double copy_gbs, gemm_tflops;
};

Ceilings measure_ceilings(CudaBackend<float>& be) {
  cudaStream_t s = static_cast<cudaStream_t>(be.stream());
  const size_t n = size_t{1} << 29;  // 2 GiB each way
  float* a = be.alloc(cuda::MemoryKind::Workspace, n);
  float* b = be.alloc(cuda::MemoryKind::Workspace, n);
  fill_random(be, a, n, 1.0f, 1);
  const double copy_ms = time_ms(s, [&] {
    CUDA_CHECK(cudaMemcpyAsync(b, a, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
  });
  be.free(b);
  be.free(a);
  // bf16 GEMM 8192^3 through cuBLASLt (the library's own best algorithm for the shape)
  const int M = 8192;
  const size_t mm = size_t(M) * M;
  float* x = be.alloc(cuda::MemoryKind::Workspace, mm);
  float* d = be.alloc(cuda::MemoryKind::Workspace, mm);
  auto* x16 = static_cast<uint16_t*>(be.alloc_bytes(cuda::MemoryKind::Workspace, mm * 2));
  auto* y16 = static_cast<uint16_t*>(be.alloc_bytes(cuda::MemoryKind::Workspace, mm * 2));
  fill_random(be, x, mm, 1.0f, 2);
  cuda::launch_convert(cuda::Out(x16, Precision::Bf16), x, M, M, M, s);
  fill_random(be, x, mm, 1.0f, 3);
  cuda::launch_convert(cuda::Out(y16, Precision::Bf16), x, M, M, M, s);
  void* ws = be.alloc_bytes(cuda::MemoryKind::Workspace, size_t{32} << 20);
  cublasLtHandle_t lt;
  CUBLAS_CHECK(cublasLtCreate(&lt));
  double gemm_ms = 0;
  {
    cuda::LtGemm gemm(lt, ws, size_t{32} << 20);
    const cuda::LtCall call{true, false, M, M,          M, CUDA_R_16BF, CUBLAS_COMPUTE_32F, x16,  M,
                            y16,  M,     d, CUDA_R_32F, M, nullptr,     CUDA_R_32F,         false};
    gemm_ms = time_ms(
        s,
        [&] {
          if (!gemm.run(call, s)) MPITRAIN_THROW("cuBLASLt has no bf16 algorithm for 8192^3");
        },
        3, 10);
  }
  CUBLAS_CHECK(cublasLtDestroy(lt));
  be.free_bytes(ws);
  be.free_bytes(y16);
  be.free_bytes(x16);
  be.free(d);
  be.free(x);
  return {2.0 * n * sizeof(float) / (copy_ms * 1e-3) / 1e9,
          2.0 * M * M * double(M) / (gemm_ms * 1e-3) / 1e12};
}

struct Row {
  std::string op;
  double ms, floor_ms;
};

void print_row(const Row& r) {
  std::printf("%-34s %10.3f %10.3f %7.1f%%\n", r.op.c_str(), r.ms, r.floor_ms,
              100.0 * r.floor_ms / r.ms);
}

void bench_ops(CudaBackend<float>& be, const Ceilings& c) {
  cudaStream_t s = static_cast<cudaStream_t>(be.stream());
  const int B = 8, T = 1024, C = 768, NH = 12, hs = 64, F = 4 * C, V = 50257, Vp = 50304;
  const int N = B * T;
  const size_t NC = size_t(N) * C;
  auto buf = [&](size_t n, uint64_t seed) {
    float* p = be.alloc(cuda::MemoryKind::Activations, n);
    fill_random(be, p, n, 1.0f, seed);
    return p;
  };
  float *x = buf(NC, 1), *y = buf(NC, 2), *dy = buf(NC, 3), *w = buf(size_t(F) * C, 4),
        *bias = buf(F, 5), *h = buf(size_t(N) * F, 6), *dh = buf(size_t(N) * F, 7),
        *qkv = buf(size_t(N) * 3 * C, 8), *dqkv = buf(size_t(N) * 3 * C, 9),
        *lse = buf(size_t(B) * NH * T, 10), *D = buf(size_t(B) * NH * T, 11), *mean = buf(N, 12),
        *rstd = buf(N, 13), *lnw = buf(C, 14), *lnb = buf(C, 15), *dlnw = buf(C, 16),
        *dlnb = buf(C, 17), *dw = buf(size_t(F) * C, 18), *db = buf(F, 19),
        *logits = buf(size_t(N) * Vp, 20), *stats = buf(2 * N, 21), *losses = buf(N, 22),
        *row_max = buf(N, 23);
  std::vector<int32_t> tok(N);
  for (int i = 0; i < N; ++i) tok[i] = (i * 7919) % V;
  auto* dtok = static_cast<int32_t*>(be.alloc_bytes(cuda::MemoryKind::Activations, N * 4));
  be.to_device(dtok, tok.data(), N * 4);
  const double rate = c.gemm_tflops * 1e12, bw = c.copy_gbs * 1e9;
  auto floor_ms = [&](double flops, double bytes) {
    return 1e3 * std::max(flops / rate, bytes / bw);
  };
  std::printf("%-34s %10s %10s %8s\n", "op (GPT-2 small layer, 8x1024)", "ms", "floor ms",
              "floor%");
  auto add = [&](const std::string& op, double flops, double bytes,
                 const std::function<void()>& f) {
    print_row({op, time_ms(s, f), floor_ms(flops, bytes)});
  };
  const double gemm_fc = 2.0 * N * C * F;
  // GEMM floors count fp32 activations and weights read/written once
  add("matmul fwd fc (768->3072, bias)", gemm_fc, 4.0 * (NC + size_t(F) * C + size_t(N) * F),
      [&] { be.matmul_forward(h, x, w, bias, N, C, F); });
  add("matmul bwd fc (dx, dW, db)", 2 * gemm_fc, 4.0 * (2 * NC + 2.0 * size_t(N) * F + 2.0 * F * C),
      [&] { be.matmul_backward(y, dw, db, dh, x, w, N, C, F, GradWrite::Add); });
  const double att_flops = 4.0 * B * NH * double(T) * T / 2 * hs;  // causal: half of QK^T and PV
  add("attention fwd (causal, 12x64)", att_flops, 4.0 * (3 * NC + NC),
      [&] { be.attention_forward(y, lse, qkv, B, T, NH, NH, hs, 1 / std::sqrt(double(hs)), 0); });
  add("attention bwd", 2.5 * att_flops, 4.0 * (3 * NC + 2 * NC + 3 * NC), [&] {
    be.attention_backward(dqkv, D, dy, qkv, y, lse, B, T, NH, NH, hs, 1 / std::sqrt(double(hs)), 0);
  });
  add("layernorm fwd", 8.0 * NC, 4.0 * 2 * NC,
      [&] { be.layernorm_forward(y, mean, rstd, x, lnw, lnb, N, C, 1e-5f); });
  add("layernorm bwd (dx +=, dw, db)", 10.0 * NC, 4.0 * 4 * NC,
      [&] { be.layernorm_backward(y, dlnw, dlnb, dy, x, lnw, mean, rstd, N, C); });
  add("gelu fwd", 10.0 * N * F, 4.0 * 2 * N * F, [&] { be.gelu_forward(dh, h, size_t(N) * F); });
  add("gelu bwd", 20.0 * N * F, 4.0 * 3 * N * F,
      [&] { be.gelu_backward(dh, h, h, size_t(N) * F); });
  add("residual add", double(NC), 4.0 * 3 * NC, [&] { be.add(y, x, dy, NC); });
  add("embedding fwd (wte + wpe)", double(NC), 4.0 * 3 * NC,
      [&] { be.embedding_forward(y, dtok, logits, x, B, T, C, 0, Vp); });
  const double lg = double(N) * Vp;
  add("cross-entropy 3 phases + grad", 6 * lg, 4.0 * 4 * lg, [&] {
    be.ce_row_max(logits, row_max, N, Vp, 0, V);
    be.ce_stats(logits, row_max, dtok, stats, N, Vp, 0, V);
    be.ce_loss(logits, row_max, stats, dtok, losses, N, Vp, 0, V, 1.0f / N);
  });
  const Segment weight[] = {{0, size_t(F) * C, true}};
  add("adamw (2.4M params)", 12.0 * F * C, 4.0 * 7 * F * C,
      [&] { be.adamw(w, dw, dh, h, weight, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 1.0f, {}); });
  for (float* p : {x,    y,   dy,  w,    bias, h,  dh, qkv,    dqkv,  lse,    D,      mean,
                   rstd, lnw, lnb, dlnw, dlnb, dw, db, logits, stats, losses, row_max})
    be.free(p);
  be.free_bytes(dtok);
}

struct StepResult {
  std::string name;
  double ms, tokens_per_s, mfu, params_m;
};

StepResult bench_step(const Args& a, const std::string& name, const ModelConfig& cfg, int B, int T,
                      const Ceilings& c) {
  CudaOptions o;
  o.kernels = a.kernels;
  o.math = a.math;
  CudaBackend<float> be(o);
  const Precision prec = a.math == GemmMath::Bf16 ? Precision::Bf16 : Precision::Fp32;
  ModelOptions mo;
  mo.precision = prec;
  if (be.stores(prec)) mo.storage = prec;  // bf16: 2-byte compute tensors, as the trainer runs
  Model<float> model(cfg, be, {}, B, T, 1, nullptr, mo);
  const size_t P = model.num_params();
  fill_random(be, model.params(), P, 0.02f, 7);
  be.set_alloc_kind(cuda::MemoryKind::Optimizer);
  Optimizer opt(be, model.layout(), OptimizerConfig{}, model.params(), ShardRanges::whole(P),
                prec);
  const int N = B * T;
  std::vector<int32_t> tok(N), tgt(N);
  for (int i = 0; i < N; ++i) {
    tok[i] = (i * 7919) % cfg.vocab_size;
    tgt[i] = (i * 104729 + 1) % cfg.vocab_size;
  }
  auto* dtok = static_cast<int32_t*>(be.alloc_bytes(cuda::MemoryKind::Activations, N * 4));
  auto* dtgt = static_cast<int32_t*>(be.alloc_bytes(cuda::MemoryKind::Activations, N * 4));
  be.seal_memory();  // after the last allocation: a sealed arena refuses new blocks
  be.to_device(dtok, tok.data(), N * 4);
  be.to_device(dtgt, tgt.data(), N * 4);
  cudaStream_t s = static_cast<cudaStream_t>(be.stream());
  double loss = 0;
  const double ms = time_ms(
      s,
      [&] {
        model.zero_grads();
        loss = model.forward(0, dtok, dtgt, B, T, 1.0f / N);
        model.backward(0, dtok, B, T);
        const double norm =
            std::sqrt(model.grad_square_sum(model.grads(), ShardRanges::whole(P)));
        opt.step(model.grads(), 1e-4f, norm > 1.0 ? static_cast<float>(1.0 / norm) : 1.0f);
      },
      2, a.steps);
  // N for MFU: parameters in matrix products (all but the embedding lookups; the head counts)
  size_t n_matmul = 0;
  for (const ParamTensor& t : model.layout().tensors())
    if (t.slot != Slot::Wpe && (t.slot != Slot::Wte || cfg.tie_embeddings)) n_matmul += t.numel;
  const double flops_per_token = 6.0 * n_matmul + 12.0 * cfg.n_layer * double(cfg.d_model) * T;
  const double tps = N / (ms * 1e-3);
  std::printf("%s: %zu params, loss %.4f, %s\n", name.c_str(), P, loss / N,
              be.memory_report().c_str());
  std::printf("%s\n", be.describe().c_str());
  for (const std::string& f : be.fallbacks()) std::printf("  fallback: %s\n", f.c_str());
  be.free_bytes(dtgt);
  be.free_bytes(dtok);
  return {name, ms, tps, flops_per_token * tps / (c.gemm_tflops * 1e12), P / 1e6};
}

// Host milliseconds of f and its stream's work: a first call includes building a cuDNN plan.
double wall_ms(CudaBackend<float>& be, const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(be.stream())));
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// One row: which path ran f (a fallback the backend reported during it names the CUDA kernel),
// the first call's time and a later call's.
void coverage_row(CudaBackend<float>& be, const std::string& what, const std::function<void()>& f) {
  const size_t before = be.fallbacks().size();
  const double first = wall_ms(be, f), again = wall_ms(be, f);
  const bool fell_back = be.fallbacks().size() > before;
  std::printf("%-34s %-13s %10.1f %10.2f\n", what.c_str(), fell_back ? "CUDA kernel" : "cuDNN",
              first, again);
}

void cudnn_coverage() {
  std::printf("\ncuDNN %zu (built with %d), its CUDA runtime %zu; CUDA runtime here %d\n",
              cudnnGetVersion(), CUDNN_VERSION, cudnnGetCudartVersion(), CUDART_VERSION);
  std::printf("%-34s %-13s %10s %10s\n", "cuDNN graph", "ran on", "first ms", "cached ms");
  CudaOptions o;
  o.kernels = KernelSet::Cudnn;
  o.math = GemmMath::Bf16;  // the attention graphs take bf16 copies
  CudaBackend<float> attn(o);
  const int B = 2, T = 256, NH = 8;
  for (int NKV : {NH, 2})
    for (int hs : {16, 32, 64, 80, 128}) {
      const size_t N = size_t(B) * T, QKV = size_t(NH + 2 * NKV) * hs, A = size_t(NH) * hs;
      const size_t S = attn.attention_state_size(B, T, NH);
      float* qkv = attn.alloc(cuda::MemoryKind::Activations, N * QKV);
      float* dqkv = attn.alloc(cuda::MemoryKind::Activations, N * QKV);
      float* out = attn.alloc(cuda::MemoryKind::Activations, N * A);
      float* dout = attn.alloc(cuda::MemoryKind::Activations, N * A);
      float* probs = attn.alloc(cuda::MemoryKind::Activations, S);
      float* scratch = attn.alloc(cuda::MemoryKind::Activations, S);
      fill_random(attn, qkv, N * QKV, 1.0f, hs);
      fill_random(attn, dout, N * A, 1.0f, hs + 1);
      const std::string shape = "hs " + std::to_string(hs) + (NKV == NH ? " MHA" : " GQA 8/2");
      coverage_row(attn, "attention fwd bf16 " + shape, [&] {
        attn.attention_forward(out, probs, qkv, B, T, NH, NKV, hs, 1 / std::sqrt(double(hs)), 0);
      });
      coverage_row(attn, "attention bwd bf16 " + shape, [&] {
        attn.attention_backward(dqkv, scratch, dout, qkv, out, probs, B, T, NH, NKV, hs,
                                1 / std::sqrt(double(hs)), 0);
      });
      for (float* p : {qkv, dqkv, out, dout, probs, scratch}) attn.free(p);
    }
  o.math = GemmMath::Fp32;
  CudaBackend<float> norms(o);
  const int rows = 2048;
  for (int C : {64, 768, 2048}) {
    const size_t NC = size_t(rows) * C;
    float* x = norms.alloc(cuda::MemoryKind::Activations, NC);
    float* y = norms.alloc(cuda::MemoryKind::Activations, NC);
    float* dy = norms.alloc(cuda::MemoryKind::Activations, NC);
    float* dx = norms.alloc(cuda::MemoryKind::Activations, NC);
    float* w = norms.alloc(cuda::MemoryKind::Activations, C);
    float* b = norms.alloc(cuda::MemoryKind::Activations, C);
    float* dw = norms.alloc(cuda::MemoryKind::Activations, C);
    float* db = norms.alloc(cuda::MemoryKind::Activations, C);
    float* mean = norms.alloc(cuda::MemoryKind::Activations, rows);
    float* rstd = norms.alloc(cuda::MemoryKind::Activations, rows);
    fill_random(norms, x, NC, 1.0f, C);
    fill_random(norms, dy, NC, 1.0f, C + 1);
    fill_random(norms, w, C, 1.0f, C + 2);
    const std::string width = " fp32 C " + std::to_string(C);
    coverage_row(norms, "layernorm fwd" + width,
                 [&] { norms.layernorm_forward(y, mean, rstd, x, w, b, rows, C, 1e-5f); });
    coverage_row(norms, "layernorm bwd" + width,
                 [&] { norms.layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, rows, C); });
    coverage_row(norms, "rmsnorm fwd" + width,
                 [&] { norms.rmsnorm_forward(y, rstd, x, w, rows, C, 1e-5f); });
    coverage_row(norms, "rmsnorm bwd" + width,
                 [&] { norms.rmsnorm_backward(dx, dw, dy, x, w, rstd, rows, C); });
    for (float* p : {x, y, dy, dx, w, b, dw, db, mean, rstd}) norms.free(p);
  }
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(k + " needs a value");
      return argv[++i];
    };
    if (k == "--kernels")
      a.kernels = parse_kernel_set(value());
    else if (k == "--math")
      a.math = parse_gemm_math(value());
    else if (k == "--steps") {
      const std::string text = value();
      if (!bench::parse_positive(text, &a.steps))
        throw UsageError("--steps needs a whole number from 1 to 10^6, not '" + text + "'");
    } else if (k == "--skip-llama")
      a.llama = false;
    else
      throw UsageError("unknown option " + k);
  }
  return a;
}

void print_step(const StepResult& r) {
  std::printf("%-24s %9.1f %10.1f %12.0f %6.1f%%\n", r.name.c_str(), r.params_m, r.ms,
              r.tokens_per_s, 100.0 * r.mfu);
}

int run(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as it is printed, also into a file
  const Args a = parse(argc, argv);
  const cuda::DeviceProbe probe = cuda::probe_devices();
  if (probe.count == 0) {
    std::printf("SKIP: %s\n", probe.reason.c_str());
    return 77;
  }
  std::printf("%s\n", cuda::describe_device(0).c_str());
  Ceilings c{};
  {
    CudaOptions o;
    o.kernels = a.kernels;
    o.math = a.math;
    CudaBackend<float> be(o);
    c = measure_ceilings(be);
    std::printf("ceilings: copy %.0f GB/s (read + write), cuBLASLt bf16 GEMM %.1f TFLOP/s\n",
                c.copy_gbs, c.gemm_tflops);
    bench_ops(be, c);
  }
  cudnn_coverage();

  std::vector<StepResult> steps;
  ModelConfig gpt2;
  gpt2.arch = Arch::Gpt2;
  gpt2.n_layer = 12, gpt2.n_head = 12, gpt2.n_kv_head = 12, gpt2.d_model = 768, gpt2.d_ff = 3072;
  gpt2.vocab_size = 50257, gpt2.max_seq_len = 1024;
  steps.push_back(bench_step(a, "gpt2-small B=8 T=1024", gpt2, 8, 1024, c));
  print_step(steps.back());
  if (a.llama) {
    ModelConfig llama;  // ~1.1B: TinyLlama's shape
    llama.set_arch(Arch::Llama);
    llama.n_layer = 22, llama.n_head = 32, llama.n_kv_head = 4, llama.d_model = 2048;
    llama.d_ff = 5632, llama.vocab_size = 32000, llama.max_seq_len = 1024;
    llama.norm_eps = 1e-5f;
    steps.push_back(bench_step(a, "llama-1.1B B=4 T=1024", llama, 4, 1024, c));
    print_step(steps.back());
  }
  std::printf("\n%-24s %9s %10s %12s %7s   (kernels %s, GEMM math %s)\n", "training step",
              "params M", "ms/step", "tokens/s", "MFU", to_string(a.kernels).c_str(),
              to_string(a.math).c_str());
  for (const StepResult& r : steps) print_step(r);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("op-bench", argc, argv, run); }
