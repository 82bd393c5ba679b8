// long-context-fit: the largest seq-len whose layout fits a rank's memory, at each cp, by the
// check the trainer runs before it allocates anything (planner/memory_fit.hpp's memory_misfit
// over the planner's memory model, the budget as --device-memory-gib gives it).
//
//   long-context-fit --config MODEL.ini [--gib 20] [--cp 1,2,4] [--recompute selective]
//                    [--micro-batch 1] [--zero 0] [--vocab-size V] [--precision bf16]
//   long-context-fit --config MODEL.ini --seq-len T [--cp 2] ...   (one layout's figure)
//
// The layout is dp 1 x tp 1 x pp 1 x cp C on C CPU ranks (each sequence over the cp group); the
// model, precision and optimizer come from the trainer's INI (planner/inputs.hpp), seq-len and
// max-seq-len set to each candidate. Seq-lens are multiples of 2 cp (the chunks). Prints per cp
// the largest seq-len that fits and its plan per part; with --seq-len, the figure of that layout
// and whether it fits --gib.
#include <cstdio>
#include <string>
#include <vector>

#include "bench_args.hpp"
#include "mpitrain/planner/inputs.hpp"
#include "mpitrain/planner/memory_fit.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/gather.hpp"

using namespace mpitrain;

namespace {

struct Args {
  std::string config, recompute = "selective", precision;
  std::vector<int> cps{1, 2, 4};
  int gib = 20, micro_batch = 1, zero = 0, vocab = 0, seq_len = 0;
};

bool parse(int argc, char** argv, Args* a) {
  const auto take = [&](const std::string& flag, const std::string& value) {
    const auto num = [&](int* out) { return bench::parse_positive(value, out); };
    const auto text = [&](std::string* out) {
      *out = value;
      return true;
    };
    if (flag == "--config") return text(&a->config);
    if (flag == "--recompute") return text(&a->recompute);
    if (flag == "--precision") return text(&a->precision);
    if (flag == "--cp") return bench::parse_list(value, &a->cps);
    if (flag == "--gib") return num(&a->gib);
    if (flag == "--micro-batch") return num(&a->micro_batch);
    if (flag == "--vocab-size") return num(&a->vocab);
    if (flag == "--seq-len") return num(&a->seq_len);
    if (flag != "--zero" || value.size() != 1 || value[0] < '0' || value[0] > '3') return false;
    a->zero = value[0] - '0';
    return true;
  };
  return bench::parse_pairs(argc, argv, take) && !a->config.empty();
}

// The model and run at seq-len T, and the layout at cp; what the trainer would check.
struct Candidate {
  PlanInput in;
  Layout layout;
};

Candidate candidate(const Args& a, int T, int cp) {
  RunOverrides over;
  over.seq_len = T;
  over.vocab_size = a.vocab;
  over.precision = a.precision;
  Candidate c{read_plan_input(a.config, over, false), {}};
  c.layout.cp = cp;
  c.layout.micro_batch = a.micro_batch;
  c.layout.zero = a.zero;
  c.layout.recompute = parse_recompute(a.recompute);
  c.in.run.global_batch = a.micro_batch;  // one micro-batch a step: the fewest token buffers
  return c;
}

// "" when the layout fits `bytes` per rank, else the trainer's message.
std::string misfit(const Candidate& c, double bytes) {
  return memory_misfit(c.in.model, c.in.run, c.layout,
                       pipeline_layer_split(c.in.model.n_layer, 1, ""), bytes,
                       "long-context-fit --gib");
}

int run(const Args& a) {
  const double bytes = a.gib * double(1 << 30);
  for (int cp : a.cps) {
    const int step = 2 * cp;  // seq-len in whole chunks
    if (a.seq_len > 0) {
      require(a.seq_len % step == 0, "seq-len " + std::to_string(a.seq_len) +
                                         " is not a multiple of 2 x cp (" + std::to_string(step) +
                                         "): the trainer splits each sequence into 2 cp chunks");
      const Candidate c = candidate(a, a.seq_len, cp);
      const MemoryEstimate e = layout_memory(c.in.model, c.in.run, c.layout, 0.0);
      std::printf("cp %d seq-len %d: %.1f MiB per rank (%s): %s %d GiB\n", cp, a.seq_len,
                  e.total() / (1 << 20), memory_breakdown(e).c_str(),
                  misfit(c, bytes).empty() ? "fits" : "does not fit", a.gib);
      continue;
    }
    if (!misfit(candidate(a, step, cp), bytes).empty()) {
      std::printf("cp %d: not even seq-len %d fits %d GiB\n", cp, step, a.gib);
      continue;
    }
    int lo = 1, hi = 2;  // in chunks of `step` tokens: lo fits, hi is to be found not to
    while (hi < (1 << 24) / step && misfit(candidate(a, hi * step, cp), bytes).empty())
      lo = hi, hi *= 2;
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (misfit(candidate(a, mid * step, cp), bytes).empty() ? lo : hi) = mid;
    }
    const Candidate best = candidate(a, lo * step, cp);
    const MemoryEstimate e = layout_memory(best.in.model, best.in.run, best.layout, 0.0);
    std::printf("cp %d: largest seq-len %d fits %d GiB per rank: %.2f GiB (%s)\n", cp, lo * step,
                a.gib, e.total() / (1 << 30), memory_breakdown(e).c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: long-context-fit --config MODEL.ini [--gib 20] [--cp 1,2,4] [--recompute "
                 "selective] [--micro-batch 1] [--zero 0] [--vocab-size V] [--precision bf16] "
                 "[--seq-len T]\n");
    return 2;
  }
  try {
    return run(a);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "long-context-fit: %s\n", e.what());
    return 2;
  }
}
