// storage-gemm: the CPU backend's linear layers of GPT-2 small (C 768: the qkv projection, the
// attention's output projection, the MLP's two, each 12 times a step, and the head, OC 50304) on N
// tokens, forward (out = inp W^T + b) and backward (dinp, dW, db), five ways:
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
// The ways take turns: each of `repeats` rounds (after one warm-up call of each) calls every way
// once, so a load that comes and goes on a shared host falls on all of them alike. Each cell: the
// median ms over the rounds, and (x) the median over the rounds of that round's time over fp32's
// in the same round. The last row sums one step's products at N tokens (12 of each block layer, 1
// head): the medians' ms, and the rows' ratios weighted by their fp32 ms. The head's tensors take
// ~1.5 GB.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
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

// GPT-2 small's linear layers: in and out widths, and how many a step runs.
struct LayerShape {
  const char* name;
  int IC, OC, per_step;
};
constexpr LayerShape kLayers[] = {{"qkv", kC, 3 * kC, 12},
                                  {"proj", kC, kC, 12},
                                  {"fc", kC, 4 * kC, 12},
                                  {"fcproj", 4 * kC, kC, 12},
                                  {"head", kC, 50304, 1}};
constexpr int kWays = 5;  // fp32, emulated, oracle, bf16, fp16

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double ms_of(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Every way once (warm-up: first-use allocations, oneDNN primitives), then `repeats` rounds of
// every way in turn; each way's median ms and median ratio to way 0 in the same round.
struct Timed {
  double ms[kWays], ratio[kWays];
};
Timed take_turns(int repeats, const std::function<void()> (&ways)[kWays]) {
  for (const auto& f : ways) f();
  std::vector<double> ms[kWays], ratio[kWays];
  for (int r = 0; r < repeats; ++r) {
    double round[kWays];
    for (int w = 0; w < kWays; ++w) round[w] = ms_of(ways[w]);
    for (int w = 0; w < kWays; ++w) {
      ms[w].push_back(round[w]);
      ratio[w].push_back(round[w] / round[0]);
    }
  }
  Timed t{};
  for (int w = 0; w < kWays; ++w) {
    t.ms[w] = median(ms[w]);
    t.ratio[w] = median(ratio[w]);
  }
  return t;
}

// The tensors of one linear layer on a backend, compute tensors stored as `dtype`, filled with
// the same bf16 values for every way.
struct Layer {
  CpuBackend<float>& be;
  int N, IC, OC;
  size_t ni, nw, no;
  Buf<float> inp, w, b, out, dout, dinp;
  float *dw, *db;

  Layer(CpuBackend<float>& backend, Precision dtype, int tokens, const LayerShape& shape)
      : be(backend),
        N(tokens),
        IC(shape.IC),
        OC(shape.OC),
        ni(static_cast<size_t>(N) * IC),
        nw(static_cast<size_t>(OC) * IC),
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
      "storage-gemm: linear layers of GPT-2 small, N=%d, %d threads, %d rounds taking turns, "
      "median ms (median x fp32 in the same round); bf16 kernels: %s\n",
      N, threads, repeats, bf16.bf16_gemms() ? "oneDNN" : "blocked sgemm");
  std::printf("%-7s %-5s %-5s %-8s %9s %18s %18s %18s %18s\n", "layer", "IC", "OC", "pass", "fp32",
              "emulated", "oracle", "bf16", "fp16");
  // one step's products: each way's ms, and its ratios weighted by fp32's ms
  double step[kWays] = {}, step_ratio[kWays] = {};
  for (const LayerShape& shape : kLayers) {
    Layer f32(fp32, Precision::Fp32, N, shape), oracle(bf16, Precision::Fp32, N, shape),
        half(bf16, Precision::Bf16, N, shape), fp16_layer(fp16, Precision::Fp16, N, shape);
    const auto forward = [](Layer& l, bool round) {
      return [&l, round] {
        l.be.matmul_forward(l.out, l.inp, l.w, l.b, l.N, l.IC, l.OC);
        if (round) l.be.round_to(l.out.full(), l.no, Precision::Bf16);
      };
    };
    const auto backward = [](Layer& l, bool round) {
      return [&l, round] {
        l.be.matmul_backward(l.dinp, l.dw, l.db, l.dout, l.inp, l.w, l.N, l.IC, l.OC,
                             GradWrite::Add);
        if (round) l.be.round_to(l.dinp.full(), l.ni, Precision::Bf16);
      };
    };
    for (const bool fwd : {true, false}) {
      const auto way = [&](Layer& l, bool round) {
        return fwd ? std::function<void()>(forward(l, round))
                   : std::function<void()>(backward(l, round));
      };
      const std::function<void()> ways[kWays] = {way(f32, false), way(f32, true), way(oracle, true),
                                                 way(half, false), way(fp16_layer, false)};
      const Timed t = take_turns(repeats, ways);
      std::printf("%-7s %-5d %-5d %-8s %9.1f", shape.name, shape.IC, shape.OC,
                  fwd ? "forward" : "backward", t.ms[0]);
      for (int w = 1; w < kWays; ++w) std::printf(" %10.1f (%4.2f)", t.ms[w], t.ratio[w]);
      std::printf("\n");
      for (int w = 0; w < kWays; ++w) {
        step[w] += shape.per_step * t.ms[w];
        step_ratio[w] += shape.per_step * t.ms[0] * t.ratio[w];
      }
    }
  }
  std::printf("%-7s %-5s %-5s %-8s %9.1f", "a step", "", "", "both", step[0]);
  for (int w = 1; w < kWays; ++w) std::printf(" %10.1f (%4.2f)", step[w], step_ratio[w] / step[0]);
  std::printf("\n");
  return 0;
}
