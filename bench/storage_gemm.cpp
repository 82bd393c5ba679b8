// storage-gemm: the CPU backend's linear layer of GPT-2 small (C 768; the qkv projection, OC
// 2304, and the head, OC 50304) on N tokens, forward (out = inp W^T + b) and backward (dinp,
// dW, db), five ways:
//   fp32      CpuBackend<float>: one sgemm per product, fp32 tensors;
//   emulated  the same on bf16 values in fp32 containers, the outputs rounded (round_to), as
//             --precision bf16 ran before 2-byte tensors;
//   oracle    a backend constructed for bf16 on fp32 containers of bf16 values (the test oracle);
//   bf16      a backend constructed for bf16 on 2-byte tensors (what the trainer now runs);
//   fp16      a backend constructed for fp16 on 2-byte fp16 tensors (the same values).
// On a CPU without bf16 instructions oracle and bf16 run the blocked sgemm; with them, oneDNN.
// fp16 runs the blocked sgemm everywhere: oneDNN 2.6.3 (Debian 12's) has no fp16 matmul kernel
// for any x86 CPU (its kernels are fp32, bf16, and AMX bf16 / int8; none for AVX512-FP16).
//
//   storage-gemm [--tokens 1024] [--threads 2] [--repeats 5]
//
// Prints the median of `repeats` calls (after one warm-up call) in ms and each way's time over
// fp32's. The head's tensors take ~1.5 GB.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/precision.hpp"

namespace {

using mpitrain::Buf;
using mpitrain::CpuBackend;
using mpitrain::GradWrite;
using mpitrain::Precision;

constexpr int kC = 768;

template <class F>
double median_ms(int repeats, F&& f) {
  f();  // warm-up: first-use allocations, oneDNN primitives
  std::vector<double> ms;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// The tensors of one linear layer on a backend, compute tensors stored as `dtype`, filled with
// the same bf16 values for every way.
struct Layer {
  CpuBackend<float>& be;
  size_t ni, nw, no;
  Buf<float> inp, w, b, out, dout, dinp;
  float *dw, *db;

  Layer(CpuBackend<float>& backend, Precision dtype, int N, int OC)
      : be(backend),
        ni(static_cast<size_t>(N) * kC),
        nw(static_cast<size_t>(OC) * kC),
        no(static_cast<size_t>(N) * OC) {
    inp = filled(ni, dtype, 1);
    w = filled(nw, dtype, 2);
    b = filled(OC, dtype, 3);
    dout = filled(no, dtype, 4);
    out = be.alloc(no, dtype);
    dinp = be.alloc(ni, dtype);
    dw = be.alloc(nw);
    db = be.alloc(OC);
  }
  ~Layer() {
    for (void* p : {inp.data(), w.data(), b.data(), out.data(), dout.data(), dinp.data(),
                    static_cast<void*>(dw), static_cast<void*>(db)})
      be.free(p);
  }
  Buf<float> filled(size_t n, Precision dtype, uint64_t seed) {
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = mpitrain::round_to(dist(gen), Precision::Bf16);
    Buf<float> t = be.alloc(n, dtype);
    be.upload(t, v.data(), n);
    return t;
  }
};

int option(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], name) == 0) {
      int v = 0;
      if (!bench::parse_positive(argv[i + 1], &v)) {
        std::fprintf(stderr, "storage-gemm: %s needs a whole number from 1 to 10^6, not '%s'\n",
                     name, argv[i + 1]);
        std::exit(2);
      }
      return v;
    }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  mpitrain::run_on_best_blas_kernel(argv);
  for (int i = 1; i < argc; i += 2) {
    const std::string a = argv[i];
    if (i + 1 >= argc || (a != "--tokens" && a != "--threads" && a != "--repeats")) {
      std::fprintf(stderr, "usage: %s [--tokens 1024] [--threads 2] [--repeats 5]\n", argv[0]);
      return a == "-h" || a == "--help" ? 0 : 2;
    }
  }
  const int N = option(argc, argv, "--tokens", 1024), threads = option(argc, argv, "--threads", 2),
            repeats = option(argc, argv, "--repeats", 5);
  CpuBackend<float> fp32(threads), bf16(threads, Precision::Bf16), fp16(threads, Precision::Fp16);
  std::printf(
      "storage-gemm: linear layers of GPT-2 small, N=%d K=%d, %d threads, median of %d "
      "calls, ms (x fp32); bf16 kernels: %s\n",
      N, kC, threads, repeats, bf16.bf16_gemms() ? "oneDNN" : "blocked sgemm");
  std::printf("%-6s %-8s %10s %18s %18s %18s %18s\n", "OC", "pass", "fp32", "emulated", "oracle",
              "bf16", "fp16");
  for (const int OC : {3 * kC, 50304}) {
    Layer f32(fp32, Precision::Fp32, N, OC), oracle(bf16, Precision::Fp32, N, OC),
        half(bf16, Precision::Bf16, N, OC), fp16_layer(fp16, Precision::Fp16, N, OC);
    const auto forward = [&](Layer& l, bool round) {
      return [&l, round, N, OC] {
        l.be.matmul_forward(l.out, l.inp, l.w, l.b, N, kC, OC);
        if (round) l.be.round_to(l.out.full(), l.no, Precision::Bf16);
      };
    };
    const auto backward = [&](Layer& l, bool round) {
      return [&l, round, N, OC] {
        l.be.matmul_backward(l.dinp, l.dw, l.db, l.dout, l.inp, l.w, N, kC, OC, GradWrite::Add);
        if (round) l.be.round_to(l.dinp.full(), l.ni, Precision::Bf16);
      };
    };
    for (const bool fwd : {true, false}) {
      const auto pass = [&](Layer& l, bool round) {
        return fwd ? median_ms(repeats, forward(l, round)) : median_ms(repeats, backward(l, round));
      };
      const double base = pass(f32, false), emulated = pass(f32, true),
                   blocked_oracle = pass(oracle, true), blocked = pass(half, false),
                   half16 = pass(fp16_layer, false);
      std::printf("%-6d %-8s %10.1f %10.1f (%4.2f) %10.1f (%4.2f) %10.1f (%4.2f) %10.1f (%4.2f)\n",
                  OC, fwd ? "forward" : "backward", base, emulated, emulated / base,
                  blocked_oracle, blocked_oracle / base, blocked, blocked / base, half16,
                  half16 / base);
    }
  }
  return 0;
}
