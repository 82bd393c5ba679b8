// data-loader: how fast the trainer's loader can feed tokens, and what opening the data costs.
//
//   data-loader --data SPEC [--seq-len 1024] [--global-batch 16] [--micro-batch 4]
//               [--steps 200] [--no-shuffle]
//
// SPEC is --train-data's syntax (files, globs, weighted blends). One process, one
// data-parallel rank, the trainer's own parts: Dataset (opening every file) and SampleStream
// (the order; a blend's walk) timed as "open"; then the same --steps steps' micro-batches read
// twice, each into the same buffers:
//   direct:   BatchLoader::load on this thread, as with --prefetch false;
//   prefetch: BatchPrefetcher::load, the consumer taking each batch at once, so the figure is the
//             rate the background reader sustains (the step's compute would hide it).
// tokens/s = steps x global batch x seq-len / seconds. The two passes must yield the same tokens
// (a checksum of both; exit 1 otherwise). The file pages come from the page cache after the
// first pass over them: a cold disk is slower, and no figure here says how much.
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "mpitrain/data/data_spec.hpp"
#include "mpitrain/data/dataset.hpp"
#include "mpitrain/data/sample_stream.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/runtime/program.hpp"
#include "mpitrain/train/batch_loader.hpp"
#include "mpitrain/train/batch_prefetch.hpp"

namespace po = boost::program_options;
using namespace mpitrain;

namespace {

struct Args {
  std::string data;
  int seq_len = 1024, global_batch = 16, micro_batch = 4, steps = 200;
  bool shuffle = true;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads every micro-batch of `steps` steps through load(consumed, micro, tokens, targets);
// returns the seconds and adds the tokens to *sum.
template <class Load>
double read_steps(const Args& a, Load&& load, uint64_t* sum) {
  std::vector<int32_t> tokens(static_cast<size_t>(a.micro_batch) * a.seq_len), targets(tokens);
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < a.steps; ++s)
    for (int m = 0; m < a.global_batch / a.micro_batch; ++m) {
      load(static_cast<uint64_t>(s) * a.global_batch, m, tokens.data(), targets.data());
      for (size_t i = 0; i < tokens.size(); ++i) *sum += tokens[i] + 3 * targets[i];
    }
  return seconds_since(t0);
}

int run(int argc, char** argv) {
  Args a;
  bool no_shuffle = false;
  po::options_description opts("data-loader: the trainer's token loader, direct and prefetched");
  opts.add_options()("help,h", "this help")("data", po::value(&a.data)->required(),
                                            "data spec, as --train-data")(
      "seq-len", po::value(&a.seq_len)->default_value(a.seq_len), "tokens per sample")(
      "global-batch", po::value(&a.global_batch)->default_value(a.global_batch),
      "samples per step")("micro-batch", po::value(&a.micro_batch)->default_value(a.micro_batch),
                          "samples per load")(
      "steps", po::value(&a.steps)->default_value(a.steps), "steps read per pass")(
      "no-shuffle", po::bool_switch(&no_shuffle), "the files in order");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    if (vm.count("help")) {
      std::cout << opts << "\n";
      return 0;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  require(a.seq_len > 0 && a.steps > 0 && a.micro_batch > 0 && a.global_batch > 0 &&
              a.global_batch % a.micro_batch == 0,
          "--seq-len, --steps, --micro-batch and --global-batch must be positive, --global-batch "
          "a multiple of --micro-batch");
  a.shuffle = !no_shuffle;

  const auto t_open = std::chrono::steady_clock::now();
  const Dataset data(parse_data_spec(a.data, "data"), TokenFormat::Auto, a.seq_len, "data");
  SampleStream stream(data, 1, a.shuffle);
  const double open_s = seconds_since(t_open);
  BatchLoader loader(stream, a.seq_len, a.global_batch, a.micro_batch, 0, 1);

  uint64_t direct_sum = 0, prefetch_sum = 0;
  const double direct_s = read_steps(
      a, [&](uint64_t c, int m, int32_t* t, int32_t* y) { loader.load(c, m, t, y); }, &direct_sum);
  std::string blocker;
  require(data.concurrent_reads(&blocker),
          blocker + " is read through HDF5 on the main thread: the trainer does not prefetch it");
  double prefetch_s = 0;
  {
    BatchPrefetcher prefetch(loader, std::max(2, a.global_batch / a.micro_batch));
    prefetch_s = read_steps(
        a, [&](uint64_t c, int m, int32_t* t, int32_t* y) { prefetch.load(c, m, t, y); },
        &prefetch_sum);
  }
  const double tokens = static_cast<double>(a.steps) * a.global_batch * a.seq_len;
  std::printf("%zu files, %llu tokens, seq-len %d, %d steps x %d samples, shuffle %s\n",
              data.files().size(), static_cast<unsigned long long>(data.tokens()), a.seq_len,
              a.steps, a.global_batch, a.shuffle ? "on" : "off");
  std::printf("%-10s %12s %14s\n", "pass", "seconds", "tokens/s");
  std::printf("%-10s %12.4f %14s\n", "open", open_s, "-");
  std::printf("%-10s %12.4f %14.3e\n", "direct", direct_s, tokens / direct_s);
  std::printf("%-10s %12.4f %14.3e\n", "prefetch", prefetch_s, tokens / prefetch_s);
  std::printf("RESULT open_s=%.4f direct_tokens_per_s=%.4e prefetch_tokens_per_s=%.4e\n", open_s,
              tokens / direct_s, tokens / prefetch_s);
  if (direct_sum != prefetch_sum) {
    std::fprintf(stderr, "data-loader: the prefetched tokens differ from the direct ones\n");
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return tool_program("data-loader", argc, argv, run); }
