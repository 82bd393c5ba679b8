// cpu-gemm: the two sgemms the CPU backend chooses between, OpenBLAS's cblas_sgemm and oneDNN's
// dnnl_sgemm (src/backend/cpu_gemm.cpp: oneDNN's where it has AVX-512 kernels for the CPU and is
// 3.11.2 or later), on
// the products of one training step.
//
//   cpu-gemm [--threads 1,2] [--repeats 5]
//
// For tiny (L4 H4 C128 V512 T64 B4) and GPT-2 small (C768 H12 V50304 T256 B4): each linear
// layer's three products (forward out = inp W^T, dinp = dout W, dW += dout^T inp) and attention's
// two forward products of one head (S = q k^T, y = P v) at the strides the backend reads them.
// Prints M N K, each library's GFLOP/s (2 M N K flops, best of `repeats` calls after a warm-up
// call) at each thread count, their ratio, and the largest relative difference of the two results
// over the largest |C| (checked: above 1e-4 the program exits 1; fp32 sums of up to 50304 terms
// in another order differ by ~1e-6 of the largest value). The last line per configuration and
// thread count: the time of one step's products (forward and backward), each library.
#include <cblas.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "../src/backend/cpu_kernels.hpp"
#include "bench_args.hpp"
#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"

namespace {

struct Product {
  const char* name;
  const char* kind;  // fwd, dinp, dW; for attention the forward's product of that shape
  bool ta, tb;
  int M, N, K, lda, ldb, count;  // count: how many one step runs
};

// The products of a step of a GPT-2 of this shape (B * T tokens, micro-batch = the batch).
std::vector<Product> step_products(int L, int C, int NH, int V, int T, int B) {
  const int N = B * T, hs = C / NH, QKV = 3 * C;
  std::vector<Product> p;
  const struct {
    const char* name;
    int IC, OC, count;
  } layers[] = {{"qkv", C, 3 * C, L},
                {"proj", C, C, L},
                {"fc", C, 4 * C, L},
                {"fcproj", 4 * C, C, L},
                {"head", C, V, 1}};
  for (const auto& l : layers) {
    p.push_back({l.name, "fwd", false, true, N, l.OC, l.IC, l.IC, l.IC, l.count});    // inp W^T
    p.push_back({l.name, "dinp", false, false, N, l.IC, l.OC, l.OC, l.IC, l.count});  // dout W
    p.push_back({l.name, "dW", true, false, l.OC, l.IC, N, l.OC, l.IC, l.count});     // dout^T inp
  }
  // per (b, h): S = q k^T (T,T,hs) and y = P v (T,hs,T), q, k, v read in place (stride QKV);
  // forward and backward run six products of these shapes (some transposed): three of each
  p.push_back({"att", "qk^T", false, true, T, T, hs, QKV, QKV, 3 * L * B * NH});
  p.push_back({"att", "pv", false, false, T, hs, T, T, QKV, 3 * L * B * NH});
  return p;
}

void openblas(const Product& p, const float* A, const float* B, float* C) {
  cblas_sgemm(CblasRowMajor, p.ta ? CblasTrans : CblasNoTrans, p.tb ? CblasTrans : CblasNoTrans,
              p.M, p.N, p.K, 1.0f, A, p.lda, B, p.ldb, 0.0f, C, p.N);
}
// oneDNN's whatever the backend runs here (its error, if any, is in the checked result)
void onednn(const Product& p, const float* A, const float* B, float* C) {
  dnnl_sgemm(p.ta ? 'T' : 'N', p.tb ? 'T' : 'N', p.M, p.N, p.K, 1.0f, A, p.lda, B, p.ldb, 0.0f, C,
             p.N);
}

void usage(const char* prog) {
  std::fprintf(stderr, "usage: %s [--threads 1,2] [--repeats 5]\n", prog);
}

}  // namespace

int main(int argc, char** argv) {
  mpitrain::run_on_best_blas_kernel(argv);
  int repeats = 5;
  std::vector<int> thread_counts = {1, 2};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      usage(argv[0]);
      return 0;
    }
    const bool ok =
        i + 1 < argc && (arg == "--repeats"   ? bench::parse_positive(argv[i + 1], &repeats)
                         : arg == "--threads" ? bench::parse_list(argv[i + 1], &thread_counts)
                                              : false);
    if (!ok) {
      std::fprintf(stderr, "cpu-gemm: bad or missing value for '%s'\n", arg.c_str());
      usage(argv[0]);
      return 2;
    }
    ++i;
  }
  const struct {
    const char* name;
    std::vector<Product> products;
  } configs[] = {{"tiny", step_products(4, 128, 4, 512, 64, 4)},
                 {"gpt2-small", step_products(12, 768, 12, 50304, 256, 4)}};
  std::printf(
      "cpu-gemm: %s against oneDNN sgemm; GFLOP/s, best of %d calls; the backend runs %s here\n",
      mpitrain::describe(mpitrain::blas_kernel()).c_str(), repeats, mpitrain::cpu_sgemm_library());
  std::printf("%-10s %-7s %-4s %6s %6s %6s %7s %9s %9s %7s %9s\n", "config", "product", "gemm", "M",
              "N", "K", "threads", "OpenBLAS", "oneDNN", "ratio", "max diff");
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  bool checked = true;
  for (const auto& config : configs) {
    for (const int threads : thread_counts) {
      omp_set_num_threads(threads);
      openblas_set_num_threads(threads);
      double step_openblas = 0, step_onednn = 0;
      for (const Product& p : config.products) {
        // A is (M, K) or, transposed, (K, M) with leading dimension lda; B likewise.
        std::vector<float> A(static_cast<size_t>(p.ta ? p.K : p.M) * p.lda),
            B(static_cast<size_t>(p.tb ? p.N : p.K) * p.ldb), C1(static_cast<size_t>(p.M) * p.N),
            C2(C1.size());
        for (float& x : A) x = dist(gen);
        for (float& x : B) x = dist(gen);
        const double s1 =
            bench::best_seconds(repeats, [&] { openblas(p, A.data(), B.data(), C1.data()); });
        const double s2 =
            bench::best_seconds(repeats, [&] { onednn(p, A.data(), B.data(), C2.data()); });
        double largest = 0, diff = 0;
        for (size_t i = 0; i < C1.size(); ++i) {
          largest = std::max(largest, std::fabs(static_cast<double>(C1[i])));
          diff = std::max(diff, std::fabs(static_cast<double>(C1[i]) - C2[i]));
        }
        const double rel = largest > 0 ? diff / largest : diff;
        checked = checked && rel <= 1e-4;
        const double flops = 2.0 * p.M * p.N * p.K;
        std::printf("%-10s %-7s %-4s %6d %6d %6d %7d %9.1f %9.1f %7.2f %9.1e\n", config.name,
                    p.name, p.kind, p.M, p.N, p.K, threads, flops / s1 / 1e9, flops / s2 / 1e9,
                    s1 / s2, rel);
        step_openblas += p.count * s1;
        step_onednn += p.count * s2;
      }
      std::printf("%-10s %-7s %-4s %20s %7d %8.1fms %8.1fms %7.2f\n", config.name, "step", "all",
                  "", threads, 1e3 * step_openblas, 1e3 * step_onednn, step_openblas / step_onednn);
    }
  }
  if (!checked) std::fprintf(stderr, "cpu-gemm: the two libraries' results differ by over 1e-4\n");
  return checked ? 0 : 1;
}
