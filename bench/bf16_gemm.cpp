// bf16-gemm: the CPU backend's sgemm against its oneDNN bf16 path on the linear layers
// of GPT-2 small (C 768, vocabulary 50304) at micro-batch 4 x 1024 tokens.
//
//   bf16-gemm [--tokens 4096] [--threads 1,2] [--repeats 3] [--no-head]
//
// For each layer (qkv, proj, fc, fcproj, head) and each of its three products — forward
// out = inp W^T, backward dinp = dout W, dW += dout^T inp — prints M N K and the GFLOP/s
// (2 M N K flops, best of `repeats` calls after a warm-up call) at each thread count of the
// sgemm, of the bf16 path as the backend runs it (the oneDNN kernel it picks: "kernel",
// cpu_matmul_bf16.hpp) and of the same through oneDNN's brgemm alone, and the ratios bf16/sgemm
// and bf16/brgemm (time over time). The bf16 figures include converting the operands to bf16, as
// the backend does on every call (dW reuses dout's bf16 copy from dinp, as matmul_backward does).
// The last line per thread count: the GEMM time of one micro-batch's forward and backward (12
// layers + head). --no-head leaves out the head (its operands take ~2.5 GB). The jit gemm's first
// ~10 calls in a process run at half speed (its packing buffers fault their pages in until the
// heap settles: 579 faults a call, GPT-2's qkv forward on the AMD EPYC Zen 5 VM), as in the
// trainer's warm-up step, so the first layer's products run kSettle times before any is timed.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "../src/backend/cpu_kernels.hpp"
#include "../src/backend/cpu_matmul_bf16.hpp"
#include "bench_args.hpp"
#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/backend/precision.hpp"

namespace {

using mpitrain::Precision;
using mpitrain::round_to;

constexpr int kLayers = 12, kC = 768, kVocab = 50304, kSettle = 12;

struct Layer {
  const char* name;
  int IC, OC, count;  // count: how many a forward pass runs (per block x 12, or the head once)
};
const Layer kModel[] = {{"qkv", kC, 3 * kC, kLayers},
                        {"proj", kC, kC, kLayers},
                        {"fc", kC, 4 * kC, kLayers},
                        {"fcproj", 4 * kC, kC, kLayers},
                        {"head", kC, kVocab, 1}};

// One product of the linear layer: C(M,N) = op(A)(M,K) op(B)(K,N) (+ C when accumulate).
struct Product {
  const char* name;
  bool ta, tb, accumulate, a_unchanged;
  int M, N, K;
  const float *A, *B;
  float* C;
};

void sgemm(const Product& p) {
  mpitrain::cpu::gemm(p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans, p.M, p.N,
                      p.K, 1.0f, p.A, p.ta ? p.M : p.K, p.B, p.tb ? p.K : p.N,
                      p.accumulate ? 1.0f : 0.0f, p.C, p.N);
}

std::vector<float> bf16_values(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = round_to(dist(gen), Precision::Bf16);
  return v;
}

void usage(const char* prog) {
  std::fprintf(stderr, "usage: %s [--tokens 4096] [--threads 1,2] [--repeats 3] [--no-head]\n",
               prog);
}

}  // namespace

int main(int argc, char** argv) {
  mpitrain::run_on_best_blas_kernel(argv);
  int tokens = 4096, repeats = 3;
  std::vector<int> thread_counts = {1, 2};
  bool head = true;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    }
    if (arg == "--no-head") {
      head = false;
      continue;
    }
    const bool ok =
        i + 1 < argc && (arg == "--tokens"    ? bench::parse_positive(argv[i + 1], &tokens)
                         : arg == "--repeats" ? bench::parse_positive(argv[i + 1], &repeats)
                         : arg == "--threads" ? bench::parse_list(argv[i + 1], &thread_counts)
                                              : false);
    if (!ok) {
      std::fprintf(stderr, "bf16-gemm: bad or missing value for '%s'\n", arg.c_str());
      usage(argv[0]);
      return 2;
    }
    ++i;
  }

  std::printf("bf16-gemm: GPT-2 small linear layers, %d tokens; GFLOP/s, best of %d calls\n",
              tokens, repeats);
  std::printf("%-7s %-5s %6s %6s %6s %7s %8s %8s %8s %-20s %6s %6s\n", "layer", "gemm", "M", "N",
              "K", "threads", "sgemm", "bf16", "brgemm", "kernel", "x sgemm", "x brg");
  for (const int threads : thread_counts) {
    omp_set_num_threads(threads);
    openblas_set_num_threads(threads);
    using mpitrain::cpu::Bf16Matmul;
    Bf16Matmul bf16,  // plan with the thread count set above
        brgemm(Bf16Matmul::kChunk, /*pack_b=*/true, Bf16Matmul::Kernels::Brgemm);
    if (!bf16.native()) std::printf("(no bf16 instructions here: the bf16 columns are sgemm)\n");
    double step_sgemm = 0.0, step_bf16 = 0.0, step_brgemm = 0.0;
    for (const Layer& l : kModel) {
      if (!head && l.OC == kVocab) continue;
      const int N = tokens, IC = l.IC, OC = l.OC;
      const std::vector<float> inp = bf16_values(static_cast<size_t>(N) * IC, 1),
                               w = bf16_values(static_cast<size_t>(OC) * IC, 2),
                               dout = bf16_values(static_cast<size_t>(N) * OC, 3);
      std::vector<float> out(static_cast<size_t>(N) * OC), dinp(static_cast<size_t>(N) * IC),
          dw(static_cast<size_t>(OC) * IC);
      const Product products[] = {
          {"fwd", false, true, false, false, N, OC, IC, inp.data(), w.data(), out.data()},
          {"dinp", false, false, false, false, N, IC, OC, dout.data(), w.data(), dinp.data()},
          {"dW", true, false, true, true, OC, IC, N, dout.data(), inp.data(), dw.data()}};
      if (&l == kModel)
        for (int i = 0; i < kSettle; ++i)
          for (const Product& p : products)
            bf16.multiply(p.ta, p.tb, p.M, p.N, p.K, p.A, p.B, p.accumulate, p.C, p.a_unchanged);
      for (const Product& p : products) {
        const double gflop = 2.0 * p.M * p.N * static_cast<double>(p.K) / 1e9;
        const double s_sgemm = bench::best_seconds(repeats, [&] { sgemm(p); });
        const auto through = [&](Bf16Matmul& mm) {
          return bench::best_seconds(repeats, [&] {
            if (!mm.multiply(p.ta, p.tb, p.M, p.N, p.K, p.A, p.B, p.accumulate, p.C, p.a_unchanged))
              sgemm(p);
          });
        };
        const double s_bf16 = through(bf16), s_brgemm = through(brgemm);
        step_sgemm += l.count * s_sgemm;
        step_bf16 += l.count * s_bf16;
        step_brgemm += l.count * s_brgemm;
        const std::string kernel = bf16.kernel(p.ta, p.tb, p.M, p.N, p.K, p.accumulate);
        std::printf("%-7s %-5s %6d %6d %6d %7d %8.1f %8.1f %8.1f %-20s %6.2f %6.2f\n", l.name,
                    p.name, p.M, p.N, p.K, threads, gflop / s_sgemm, gflop / s_bf16,
                    gflop / s_brgemm, kernel.empty() ? "sgemm" : kernel.c_str(), s_sgemm / s_bf16,
                    s_brgemm / s_bf16);
        std::fflush(stdout);
      }
    }
    std::printf(
        "micro-batch GEMMs (12 layers%s), %d thread(s): sgemm %.2f s, bf16 %.2f s, brgemm %.2f s, "
        "bf16 x sgemm %.2f, x brgemm %.2f\n",
        head ? " + head" : "", threads, step_sgemm, step_bf16, step_brgemm, step_sgemm / step_bf16,
        step_brgemm / step_bf16);
  }
  return 0;
}
