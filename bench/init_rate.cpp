// init-rate: how fast a run sets up its CPU tensors, by thread count: drawing the initial
// parameters (initial_tensors), and allocating zeroed tensors (CpuBackend::alloc: parameters,
// gradients, optimizer state and activations; the first touch of their pages).
//
//   init-rate [--n-layer 12] [--d-model 768] [--vocab-size 50304] [--threads 1,2] [--repeats 3]
//
// A GPT-2 shape (F = 4C, one rank's whole model, as every rank of a tp group draws it). Per thread
// count, one row of each table: the best of --repeats (wall seconds; the draws after a warm-up
// one), its rate, and the speed as a ratio to the first row's. Every row must draw the same bits:
// one more, untimed draw per row sums every value's checkpoint checksum (ckpt/format.hpp); exit 1
// where a row's sum differs from the first's. The allocations (a tensor the parameters' size each;
// the gradients and AdamW's moments are as large) are on huge pages, the trainer's default
// (--huge-pages), and all stay held until the table ends: rows x repeats tensors. (Their zeros are
// the unit tests' to check: a fresh page reads as zeros whether or not alloc wrote them.)
#include <omp.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <list>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/ckpt/format.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

// The sum of every tensor's checksum over one draw of its initial values, on this thread count.
uint64_t drawn_checksum(const ModelConfig& c, const ParamLayout& layout) {
  uint64_t sum = 0;
  initial_tensors<float>(c, layout, 1234, [&](const ParamTensor& t, const float* x) {
    sum += checksum(x, 0, t.numel);
  });
  return sum;
}

// One row's backend and the tensors it allocated, freed when the table ends (~Allocations), so
// that every allocation touches pages this process has not used: pages freed a moment before come
// back much faster than a run's fresh ones (13 against 0.6 GiB/s on one thread of a Zen 5 VM,
// whose hypervisor backs a fresh page on its first touch).
struct Allocations {
  CpuBackend<float> backend;
  std::vector<float*> tensors;
  explicit Allocations(int threads) : backend(threads) {}
  Allocations(const Allocations&) = delete;
  Allocations& operator=(const Allocations&) = delete;
  ~Allocations() {
    for (float* t : tensors) backend.free(t);
  }
};

// The best of `repeats` wall seconds of allocating a zeroed fp32 tensor of n values on the
// backend's threads, as the trainer does.
double best_alloc_seconds(Allocations& row, size_t n, int repeats) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    float* t = row.backend.alloc(n);
    const auto t1 = std::chrono::steady_clock::now();
    row.tensors.push_back(t);
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

int run(int argc, char** argv) {
  ModelConfig c;
  c.set_arch(Arch::Gpt2);
  c.n_layer = 12;
  c.d_model = 768;
  c.vocab_size = 50304;
  std::string threads_text = "1,2";
  int repeats = 3;
  po::options_description opts(
      "init-rate: the initial parameters drawn and the zeroed tensors allocated per second, by "
      "thread count\noptions");
  opts.add_options()("help,h", "show this help")(
      "n-layer", po::value(&c.n_layer)->default_value(c.n_layer), "blocks")(
      "d-model", po::value(&c.d_model)->default_value(c.d_model), "width C (F = 4C, heads C/64)")(
      "vocab-size", po::value(&c.vocab_size)->default_value(c.vocab_size), "vocabulary")(
      "threads", po::value(&threads_text)->default_value(threads_text), "thread counts, e.g. 1,2")(
      "repeats", po::value(&repeats)->default_value(repeats), "timed draws (the best counts)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return kExitOk;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  std::vector<int> threads;
  require(bench::parse_list(threads_text, &threads), "--threads: positive integers, e.g. 1,2");
  require(repeats >= 1 && repeats <= 100, "--repeats must be in [1, 100]");
  require(c.n_layer >= 1 && c.d_model >= 64 && c.d_model % 64 == 0 && c.vocab_size >= 1,
          "--n-layer >= 1, --d-model a multiple of 64, --vocab-size >= 1");
  c.n_head = c.n_kv_head = c.d_model / 64;
  c.d_ff = 4 * c.d_model;
  c.max_seq_len = 1024;
  const ParamLayout layout(c);
  std::printf("GPT-2 L%d C%d V%d: %.2fM values, best of %d, wall seconds\n", c.n_layer, c.d_model,
              c.vocab_size, layout.total() / 1e6, repeats);
  std::printf("%8s %10s %12s %8s\n", "threads", "seconds", "M values/s", "ratio");
  double first = 0;
  uint64_t first_sum = 0;
  for (const int n : threads) {
    omp_set_num_threads(n);
    const double seconds = bench::best_seconds(repeats, [&] {
      initial_tensors<float>(c, layout, 1234, [](const ParamTensor&, const float*) {});
    });
    const uint64_t sum = drawn_checksum(c, layout);
    const double rate = layout.total() / 1e6 / seconds;
    if (first == 0) first = rate, first_sum = sum;
    std::printf("%8d %10.3f %12.1f %8.2f\n", n, seconds, rate, rate / first);
    if (sum != first_sum) {
      std::printf("%d threads drew other values than %d (checksum)\n", n, threads[0]);
      return kExitFailure;
    }
  }
  const double gib = layout.total() * sizeof(float) / double(1 << 30);
  std::printf("\nzeroed fp32 tensors of %.2fM values (%.2f GiB) on fresh huge pages, best of %d\n",
              layout.total() / 1e6, gib, repeats);
  std::printf("%8s %10s %12s %8s\n", "threads", "seconds", "GiB/s", "ratio");
  first = 0;
  std::list<Allocations> rows;
  for (const int n : threads) {
    const double seconds = best_alloc_seconds(rows.emplace_back(n), layout.total(), repeats);
    if (first == 0) first = gib / seconds;
    std::printf("%8d %10.3f %12.2f %8.2f\n", n, seconds, gib / seconds, gib / seconds / first);
  }
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("init-rate", argc, argv, run); }
