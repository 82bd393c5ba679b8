// bench-kernels: the CPU backend's float ops at a model's shapes, and a GPT-2 training step made
// of them (the op sequence of Model::forward/backward plus grad norm and AdamW), reported against
// this machine's sgemm rate with PaLM's 6N + 12 L C T flops per token (as the trainer counts MFU).
//
//   bench-kernels [small|tiny|all] [--threads N] [--steps S]
//
// small: GPT-2 small L12 H12 C768 V50304 T256 B4; tiny: L4 H4 C128 V512 T64 B4. Prints the median
// step time, the time per op kind summed over the step, and MFU.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"

namespace {

using mpitrain::CpuBackend;
using Clock = std::chrono::steady_clock;

struct Shape {
  const char* name;
  int L, NH, C, V, T, B;
};

// Accumulates seconds per op name over a step.
struct Timer {
  std::map<std::string, double> total;
  template <class F>
  void operator()(const char* op, F&& f) {
    const auto t0 = Clock::now();
    f();
    total[op] += std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

struct LayerParams {
  float *ln1w, *ln1b, *qkvw, *qkvb, *projw, *projb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};
struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *probs, *attproj, *res2, *ln2, *ln2_mean,
      *ln2_rstd, *fch, *fch_act, *fcproj, *res3;
};

// Carves a flat buffer into per-layer slots (sizes in the order of LayerParams).
LayerParams carve_params(float*& cur, int C) {
  auto take = [&](size_t n) { float* p = cur; cur += n; return p; };
  const size_t c = C;
  return {take(c),         take(c), take(3 * c * c), take(3 * c), take(c * c), take(c),
          take(c),         take(c), take(4 * c * c), take(4 * c), take(4 * c * c), take(c)};
}

void run(const Shape& s, int steps, double sgemm_gflops) {
  CpuBackend<float> be(omp_get_max_threads());
  const int L = s.L, NH = s.NH, C = s.C, T = s.T, B = s.B, N = B * T, V = s.V, hs = C / NH;
  const int Vp = (V + 127) / 128 * 128;
  const size_t per_layer_params = 12ull * C * C + 13ull * C;
  const size_t nparams = static_cast<size_t>(Vp) * C + static_cast<size_t>(T) * C +
                         L * per_layer_params + 2ull * C;
  // params, grads, m, v
  float* params = be.alloc(nparams);
  float* grads = be.alloc(nparams);
  float* m = be.alloc(nparams);
  float* v = be.alloc(nparams);
  {
    std::mt19937 gen(1);
    std::normal_distribution<float> dist(0.0f, 0.02f);
    for (size_t i = 0; i < nparams; ++i) params[i] = dist(gen);
  }
  float* pc = params;
  float* gc = grads;
  float* wte = pc; pc += static_cast<size_t>(Vp) * C;
  float* wpe = pc; pc += static_cast<size_t>(T) * C;
  float* dwte = gc; gc += static_cast<size_t>(Vp) * C;
  float* dwpe = gc; gc += static_cast<size_t>(T) * C;
  std::vector<LayerParams> P(L), G(L);
  for (int l = 0; l < L; ++l) {
    P[l] = carve_params(pc, C);
    G[l] = carve_params(gc, C);
    std::fill(P[l].ln1w, P[l].ln1w + C, 1.0f);
    std::fill(P[l].ln2w, P[l].ln2w + C, 1.0f);
  }
  float *lnfw = pc, *lnfb = pc + C, *dlnfw = gc, *dlnfb = gc + C;
  std::fill(lnfw, lnfw + C, 1.0f);

  // activations (per layer, as the model keeps them)
  const size_t nc = static_cast<size_t>(N) * C, att = static_cast<size_t>(B) * NH * T * T;
  std::vector<float*> owned;
  auto A = [&](size_t n) { owned.push_back(be.alloc(n)); return owned.back(); };
  float* encoded = A(nc);
  std::vector<LayerActs> acts(L);
  for (auto& a : acts)
    a = {A(nc), A(N), A(N), A(3 * nc), A(nc), A(att), A(nc), A(nc), A(nc), A(N), A(N),
         A(4 * nc), A(4 * nc), A(nc), A(nc)};
  float *lnf = A(nc), *lnf_mean = A(N), *lnf_rstd = A(N), *logits = A(static_cast<size_t>(N) * Vp),
        *losses = A(N), *row_max = A(N), *ce_stats = A(2 * static_cast<size_t>(N));
  float *dres = A(nc), *dln = A(nc), *dqkv = A(3 * nc), *datty = A(nc), *scratch = A(att),
        *dfch = A(4 * nc), *dfch_act = A(4 * nc);
  std::vector<int32_t> tokens(N), targets(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 7919) % V, targets[i] = (i * 104729 + 3) % V;

  std::vector<double> step_s;
  Timer tm;
  for (int step = 0; step <= steps; ++step) {
    if (step == 1) tm.total.clear();  // step 0 warms up
    const auto t0 = Clock::now();
    tm("zero", [&] { be.zero(grads, nparams); });
    tm("embedding", [&] { be.embedding_forward(encoded, tokens.data(), wte, wpe, B, T, C, 0, Vp); });
    const float* x = encoded;
    for (int l = 0; l < L; ++l) {
      LayerActs& a = acts[l];
      const LayerParams& p = P[l];
      tm("layernorm", [&] { be.layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p.ln1w, p.ln1b, N, C, 1e-5f); });
      tm("matmul", [&] { be.matmul_forward(a.qkv, a.ln1, p.qkvw, p.qkvb, N, C, 3 * C); });
      tm("attention", [&] { be.attention_forward(a.atty, a.probs, a.qkv, B, T, NH, NH, hs); });
      tm("matmul", [&] { be.matmul_forward(a.attproj, a.atty, p.projw, p.projb, N, C, C); });
      tm("add", [&] { be.add(a.res2, x, a.attproj, nc); });
      tm("layernorm", [&] { be.layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p.ln2w, p.ln2b, N, C, 1e-5f); });
      tm("matmul", [&] { be.matmul_forward(a.fch, a.ln2, p.fcw, p.fcb, N, C, 4 * C); });
      tm("gelu", [&] { be.gelu_forward(a.fch_act, a.fch, 4 * nc); });
      tm("matmul", [&] { be.matmul_forward(a.fcproj, a.fch_act, p.fcprojw, p.fcprojb, N, 4 * C, C); });
      tm("add", [&] { be.add(a.res3, a.res2, a.fcproj, nc); });
      x = a.res3;
    }
    tm("layernorm", [&] { be.layernorm_forward(lnf, lnf_mean, lnf_rstd, x, lnfw, lnfb, N, C, 1e-5f); });
    tm("matmul", [&] { be.matmul_forward(logits, lnf, wte, nullptr, N, C, Vp); });
    double loss = 0;
    tm("crossentropy", [&] {  // one rank: the three phases with no all-reduce between them
      be.ce_row_max(logits, row_max, N, Vp, 0, V);
      be.ce_stats(logits, row_max, targets.data(), ce_stats, N, Vp, 0, V);
      loss = be.ce_loss(logits, row_max, ce_stats, targets.data(), losses, N, Vp, 0, V, 1.0f / N);
    });
    // backward
    tm("matmul", [&] { be.matmul_backward(dln, dwte, nullptr, logits, lnf, wte, N, C, Vp); });
    tm("zero", [&] { be.zero(dres, nc); });
    tm("layernorm", [&] { be.layernorm_backward(dres, dlnfw, dlnfb, dln, x, lnfw, lnf_mean, lnf_rstd, N, C); });
    for (int l = L - 1; l >= 0; --l) {
      LayerActs& a = acts[l];
      const LayerParams &p = P[l], &g = G[l];
      const float* xl = l == 0 ? encoded : acts[l - 1].res3;
      tm("matmul", [&] { be.matmul_backward(dfch_act, g.fcprojw, g.fcprojb, dres, a.fch_act, p.fcprojw, N, 4 * C, C); });
      tm("gelu", [&] { be.gelu_backward(dfch, a.fch, dfch_act, 4 * nc); });
      tm("matmul", [&] { be.matmul_backward(dln, g.fcw, g.fcb, dfch, a.ln2, p.fcw, N, C, 4 * C); });
      tm("layernorm", [&] { be.layernorm_backward(dres, g.ln2w, g.ln2b, dln, a.res2, p.ln2w, a.ln2_mean, a.ln2_rstd, N, C); });
      tm("matmul", [&] { be.matmul_backward(datty, g.projw, g.projb, dres, a.atty, p.projw, N, C, C); });
      tm("attention", [&] { be.attention_backward(dqkv, scratch, datty, a.qkv, a.probs, B, T, NH, NH, hs); });
      tm("matmul", [&] { be.matmul_backward(dln, g.qkvw, g.qkvb, dqkv, a.ln1, p.qkvw, N, C, 3 * C); });
      tm("layernorm", [&] { be.layernorm_backward(dres, g.ln1w, g.ln1b, dln, xl, p.ln1w, a.ln1_mean, a.ln1_rstd, N, C); });
    }
    tm("embedding", [&] { be.embedding_backward(dwte, dwpe, dres, tokens.data(), B, T, C, 0, Vp); });
    double ss = 0;
    tm("optimizer", [&] { ss = be.sum_squares(grads, nparams); });
    tm("optimizer", [&] { be.adamw(params, grads, m, v, nparams, 1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, step + 1, 1.0f); });
    const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    if (step > 0) step_s.push_back(sec);
    if (step == 0) std::printf("%s: loss %.4f grad-norm %.4f (warm-up step %.1f ms)\n", s.name, loss / N, std::sqrt(ss), sec * 1e3);
  }
  std::sort(step_s.begin(), step_s.end());
  const double med = step_s[step_s.size() / 2];
  const double matmul_params = 12.0 * L * C * C + static_cast<double>(Vp) * C;
  const double flops = (6.0 * matmul_params + 12.0 * L * C * T) * N;
  std::printf("%s (L%d H%d C%d V%d T%d B%d, %d threads): median step %.2f ms over %d steps, "
              "%.1f GFLOP/s = %.1f%% of sgemm %.1f GFLOP/s\n",
              s.name, L, NH, C, V, T, B, be.threads(), med * 1e3, steps, flops / med / 1e9,
              100.0 * flops / med / 1e9 / sgemm_gflops, sgemm_gflops);
  double sum = 0;
  for (auto& [k, t] : tm.total) sum += t;
  for (auto& [k, t] : tm.total)
    std::printf("  %-13s %8.2f ms/step  %5.1f%%\n", k.c_str(), t / steps * 1e3, 100.0 * t / sum);
  for (float* p : owned) be.free(p);
  be.free(params); be.free(grads); be.free(m); be.free(v);
}

}  // namespace

int main(int argc, char** argv) {
  std::string which = "all";
  int threads = 0, steps = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) steps = std::atoi(argv[++i]);
    else which = argv[i];
  }
  if (threads > 0) omp_set_num_threads(threads);
  CpuBackend<float> init(threads);  // sets OpenMP and OpenBLAS threads for the sgemm rate too
  const double peak = mpitrain::measure_sgemm_gflops(2048, 5);
  const Shape tiny{"tiny", 4, 4, 128, 512, 64, 4}, small{"gpt2-small", 12, 12, 768, 50304, 256, 4};
  if (which == "tiny" || which == "all") run(tiny, steps > 0 ? steps : 31, peak);
  if (which == "small" || which == "all") run(small, steps > 0 ? steps : 5, peak);
  return 0;
}
