// init-rate: how fast a run draws its initial parameters (initial_tensors), by thread count.
//
//   init-rate [--n-layer 12] [--d-model 768] [--vocab-size 50304] [--threads 1,2] [--repeats 3]
//
// A GPT-2 shape (F = 4C, one rank's whole model, as every rank of a tp group draws it). Per thread
// count, one row: the best of --repeats draws after a warm-up one (wall seconds), millions of
// values per second, and the speed as a ratio to the first row's. Every row must draw the same
// bits: one more, untimed draw per row sums every value's checkpoint checksum (ckpt/format.hpp);
// exit 1 where a row's sum differs from the first's.
#include <omp.h>

#include <boost/program_options.hpp>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "bench_args.hpp"
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

int run(int argc, char** argv) {
  ModelConfig c;
  c.set_arch(Arch::Gpt2);
  c.n_layer = 12;
  c.d_model = 768;
  c.vocab_size = 50304;
  std::string threads_text = "1,2";
  int repeats = 3;
  po::options_description opts(
      "init-rate: millions of initial parameter values drawn per second, by thread count\noptions");
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
  return kExitOk;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("init-rate", argc, argv, run); }
