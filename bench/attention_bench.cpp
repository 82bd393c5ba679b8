// attention-bench: the CPU backend's causal attention, forward + backward, against the dense
// kernel it replaced (tests/support/dense_attention.hpp: the whole T x T probabilities kept), at
// each sequence length, the two timed in turn in one run (the machine's load hits both alike).
//
//   attention-bench [--lengths 64,256,1024,4096] [--heads 4] [--kv-heads 4] [--head-size 64]
//                   [--batch 1] [--threads 2] [--repeats 3] [--dense-gib 4] [--window N]
//                   [--documents L]
//
// Prints per length: the best of `repeats` calls (after a warm-up) in ms of flash and dense,
// dense / flash, and each one's attention state + backward scratch in MiB. The dense kernel is
// skipped where its state and scratch (2 B NH T^2 floats) would pass --dense-gib GiB. Then the
// flash kernel as bf16 training runs it (a backend built for bf16, the tensors stored in bf16:
// bf16 tiles where the CPU has AVX512-BF16, else the fp32 kernel on the widened values), timed in
// turn with the other two, and flash / that. With --window N and / or --documents L, the fp32
// flash kernel with that mask too (each query against its N latest keys; a document of L tokens
// every L positions, each query against its own document's keys: --document-mask), timed in turn
// with the rest, and flash / that. The header names the tiles' kernel of each
// (CpuBackend::attention_tiles).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "../tests/support/dense_attention.hpp"
#include "bench_args.hpp"
#include "mpitrain/backend/blas_kernel.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"

namespace {

struct Args {
  std::vector<int> lengths{64, 256, 1024, 4096};
  int heads = 4, kv_heads = 4, head_size = 64, batch = 1, threads = 2, repeats = 3, dense_gib = 4;
  int window = 0;     // none
  int documents = 0;  // none
  bool masked() const { return window > 0 || documents > 0; }
  std::string mask_name() const {
    const std::string w = window > 0 ? "window " + std::to_string(window) : "";
    const std::string d = documents > 0 ? "docs " + std::to_string(documents) : "";
    return w + (w.empty() || d.empty() ? "" : ", ") + d;
  }
};

bool parse(int argc, char** argv, Args* a) {
  const auto take = [&](const std::string& flag, const std::string& value) {
    const auto num = [&](int* out) { return bench::parse_positive(value, out); };
    if (flag == "--lengths") return bench::parse_list(value, &a->lengths);
    if (flag == "--heads") return num(&a->heads);
    if (flag == "--kv-heads") return num(&a->kv_heads);
    if (flag == "--head-size") return num(&a->head_size);
    if (flag == "--batch") return num(&a->batch);
    if (flag == "--threads") return num(&a->threads);
    if (flag == "--repeats") return num(&a->repeats);
    if (flag == "--dense-gib") return num(&a->dense_gib);
    if (flag == "--window") return num(&a->window);
    if (flag == "--documents") return num(&a->documents);
    return false;
  };
  return bench::parse_pairs(argc, argv, take) && a->heads % a->kv_heads == 0;
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  mpitrain::run_on_best_blas_kernel(argv);
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(
        stderr,
        "usage: attention-bench [--lengths 64,256,...] [--heads N] [--kv-heads N] "
        "[--head-size N] [--batch N] [--threads N] [--repeats N] [--dense-gib N] "
        "[--window N] [--documents L] (positive integers; heads a multiple of kv-heads)\n");
    return 2;
  }
  mpitrain::CpuBackend<float> be(a.threads);
  const int B = a.batch, NH = a.heads, NKV = a.kv_heads, hs = a.head_size;
  const float scale = 1 / std::sqrt(static_cast<float>(hs));
  mpitrain::CpuBackend<float> be16(a.threads, mpitrain::Precision::Bf16);
  std::printf(
      "attention forward+backward: B %d NH %d NKV %d hs %d, %d threads, %s; fp32: %s; "
      "bf16: %s\n",
      B, NH, NKV, hs, a.threads, mpitrain::cpu_sgemm_in_use().c_str(), be.attention_tiles().c_str(),
      be16.attention_tiles().c_str());
  std::printf("%7s %12s %12s %8s %14s %14s %12s %10s", "T", "flash ms", "dense ms", "ratio",
              "flash MiB", "dense MiB", "bf16 ms", "x bf16");
  if (a.masked()) std::printf(" %16s %10s", a.mask_name().c_str(), "x masked");
  std::printf("\n");
  for (const int T : a.lengths) {
    const size_t QKV = static_cast<size_t>(NH + 2 * NKV) * hs, N = static_cast<size_t>(B) * T;
    const std::vector<float> qkv = random_floats(N * QKV, 1), dout = random_floats(N * NH * hs, 2);
    std::vector<float> out(N * NH * hs), dqkv(N * QKV);
    const size_t flash_state = be.attention_state_size(B, T, NH);
    const double dense_state = 1.0 * B * NH * T * T;
    const bool dense = 2 * dense_state * sizeof(float) <= a.dense_gib * 1073741824.0;
    std::vector<float> lse(flash_state), D(flash_state), probs, scratch;
    if (dense) {
      probs.resize(static_cast<size_t>(dense_state));
      scratch.resize(probs.size());
    }
    std::vector<int32_t> starts(N);  // the documents' starts (--documents)
    for (size_t i = 0; i < N; ++i)
      starts[i] = a.documents > 0 ? static_cast<int>(i % T) / a.documents * a.documents : 0;
    // the fp32 flash kernel with a mask (none: causal)
    const auto flash_with = [&](const mpitrain::AttentionMask& mask) {
      return [&, mask] {
        be.attention_forward(out.data(), lse.data(), qkv.data(), B, T, NH, NKV, hs, scale, mask);
        be.attention_backward(dqkv.data(), D.data(), dout.data(), qkv.data(), out.data(),
                              lse.data(), B, T, NH, NKV, hs, scale, mask);
      };
    };
    const auto flash_step = flash_with({});
    const auto masked_step = flash_with({a.window, starts.data()});
    const bool parallel = mpitrain::testing::heads_in_parallel(B, T, NH, hs, B * NH);
    const auto dense_step = [&] {
      mpitrain::testing::dense_attention_forward(out.data(), probs.data(), qkv.data(), B, T, NH,
                                                 NKV, hs, scale, parallel);
      mpitrain::testing::dense_attention_backward(dqkv.data(), scratch.data(), dout.data(),
                                                  qkv.data(), probs.data(), B, T, NH, NKV, hs,
                                                  scale, parallel);
    };
    // the same values in bf16 tensors
    const auto bf16_tensor = [&](const std::vector<float>& v) {
      const mpitrain::Buf<float> t = be16.alloc(v.size(), mpitrain::Precision::Bf16);
      be16.upload(t, v.data(), v.size());
      return t;
    };
    const mpitrain::Buf<float> qkv16 = bf16_tensor(qkv), dout16 = bf16_tensor(dout),
                               out16 = bf16_tensor(out), dqkv16 = bf16_tensor(dqkv);
    const auto bf16_step = [&] {
      be16.attention_forward(out16, lse.data(), qkv16, B, T, NH, NKV, hs, scale, 0);
      be16.attention_backward(dqkv16, D.data(), dout16, qkv16, out16, lse.data(), B, T, NH, NKV, hs,
                              scale, 0);
    };
    // interleaved: dense, flash, bf16, masked, dense, ... (a warm-up of each first)
    double flash_best = 1e30, dense_best = 1e30, bf16_best = 1e30, masked_best = 1e30;
    if (dense) dense_step();
    flash_step();
    bf16_step();
    if (a.masked()) masked_step();
    for (int r = 0; r < a.repeats; ++r) {
      if (dense) dense_best = std::min(dense_best, seconds(dense_step));
      flash_best = std::min(flash_best, seconds(flash_step));
      bf16_best = std::min(bf16_best, seconds(bf16_step));
      if (a.masked()) masked_best = std::min(masked_best, seconds(masked_step));
    }
    for (const mpitrain::Buf<float>& t : {qkv16, dout16, out16, dqkv16}) be16.free(t.data());
    const double mib = 4.0 / 1048576;
    if (dense)
      std::printf("%7d %12.2f %12.2f %8.2f %14.3f %14.1f", T, flash_best * 1e3, dense_best * 1e3,
                  dense_best / flash_best, 2 * flash_state * mib, 2 * dense_state * mib);
    else
      std::printf("%7d %12.2f %12s %8s %14.3f %14.1f", T, flash_best * 1e3, "-", "-",
                  2 * flash_state * mib, 2 * dense_state * mib);
    std::printf(" %12.2f %10.2f", bf16_best * 1e3, flash_best / bf16_best);
    if (a.masked()) std::printf(" %16.2f %10.2f", masked_best * 1e3, flash_best / masked_best);
    std::printf("%s\n", dense ? "" : " (dense skipped: > --dense-gib)");
    std::fflush(stdout);
  }
  return 0;
}
