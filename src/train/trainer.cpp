#include "mpitrain/train/trainer.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/data/byte_tokenizer.hpp"
#include "mpitrain/data/samples.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/model/llmc_model.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/optim/adamw.hpp"
#include "mpitrain/optim/lr_schedule.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/train/batch_loader.hpp"
#include "mpitrain/train/generate.hpp"
#include "mpitrain/train/metrics.hpp"
#include "mpitrain/train/model_setup.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// Threads per rank: the option, else OMP_NUM_THREADS, else this node's cores shared evenly.
int resolve_threads(int requested, const MpiComm& world) {
  if (requested > 0) return requested;
  if (const char* env = std::getenv("OMP_NUM_THREADS"); env && std::atoi(env) > 0) return std::atoi(env);
  MpiComm node = world.split_shared();
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / node.size());
}

// Largest token id in this rank's share of the file.
uint32_t local_max_token(const TokenSource* src, const MpiComm& world) {
  if (src == nullptr || src->size() == 0) return 0;
  const uint64_t n = src->size(), per = (n + world.size() - 1) / world.size();
  const uint64_t begin = std::min(n, per * world.rank()), end = std::min(n, begin + per);
  return begin < end ? max_token(*src, begin, end) : 0;
}

// Refuses to write into a directory that holds anything, or over an existing export file,
// unless --overwrite; then creates the directory and records the options used.
void prepare_out_dir(const Options& o) {
  const TrainConfig& t = o.train;
  const fs::path dir(t.out_dir);
  std::error_code ec;
  if (fs::exists(dir, ec) && !t.overwrite) {
    require(fs::is_directory(dir, ec), "out-dir " + t.out_dir + " exists and is not a directory");
    require(fs::is_empty(dir, ec), "out-dir " + t.out_dir +
                                       " already holds files; pass --overwrite or choose another");
  }
  require(t.export_llmc.empty() || !fs::exists(t.export_llmc, ec) || t.overwrite,
          "export-llmc file " + t.export_llmc + " exists; pass --overwrite or choose another");
  fs::create_directories(dir, ec);
  require(!ec, "cannot create out-dir " + t.out_dir + ": " + ec.message());
  std::ofstream ini(dir / "run.ini");
  require(static_cast<bool>(ini << o.effective), "cannot write " + (dir / "run.ini").string());
}

// Mean loss per token over the first `samples` validation windows; rank r takes r, r+dp, ...
double evaluate(Model<float>& model, const SampleWindows& val, int samples, int micro_batch,
                int seq_len, Communicator& dp, std::vector<int32_t>& tokens,
                std::vector<int32_t>& targets) {
  const uint64_t total = std::min<uint64_t>(samples, val.count());
  double sums[2] = {0.0, 0.0};  // loss, tokens
  uint64_t next = dp.rank();
  while (next < total) {
    int rows = 0;
    for (; rows < micro_batch && next < total; ++rows, next += dp.size())
      val.read(next, tokens.data() + rows * seq_len, targets.data() + rows * seq_len);
    sums[0] += model.forward(tokens.data(), targets.data(), rows, seq_len, 0.0f);
    sums[1] += static_cast<double>(rows) * seq_len;
  }
  dp.all_reduce(sums, 2, ReduceOp::Sum);
  return sums[0] / sums[1];
}

std::string format_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  return buf;
}

}  // namespace

void train(const Options& o, const MpiComm& world) {
  const TrainConfig& t = o.train;
  const bool root = world.rank() == 0;
  MpiCommunicator dp(MpiComm::world());  // data parallelism over all ranks

  // ---- set-up: every check before any work; a failure on any rank stops all alike ----------
  std::unique_ptr<TokenSource> train_src, val_src;
  std::unique_ptr<SampleWindows> train_windows, val_windows;
  ModelConfig cfg;
  all_or_none(world, [&] {
    const TokenFormat format = parse_token_format(t.data_format);
    train_src = open_tokens(t.train_data, format);
    if (!t.val_data.empty()) val_src = open_tokens(t.val_data, format);
    cfg = resolve_model_config(o, *train_src);
    require(t.global_batch_size % (world.size() * t.micro_batch_size) == 0,
            "global-batch-size " + std::to_string(t.global_batch_size) +
                " must be divisible by ranks x micro-batch-size = " + std::to_string(world.size()) +
                " x " + std::to_string(t.micro_batch_size));
    train_windows = std::make_unique<SampleWindows>(*train_src, t.seq_len);
    if (val_src) val_windows = std::make_unique<SampleWindows>(*val_src, t.seq_len);
  });
  uint32_t max_ids[2] = {0, 0};  // train, val
  all_or_none(world, [&] {
    max_ids[0] = local_max_token(train_src.get(), world);
    max_ids[1] = local_max_token(val_src.get(), world);
  });
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, max_ids, 2, MPI_UINT32_T, MPI_MAX, world.get()));
  for (int i = 0; i < 2; ++i)
    require(max_ids[i] < static_cast<uint32_t>(cfg.vocab_size),
            (i ? t.val_data : t.train_data) + " holds token id " + std::to_string(max_ids[i]) +
                ", not below vocab-size " + std::to_string(cfg.vocab_size));

  const int threads = resolve_threads(t.threads, world);
  CpuBackend<float> backend(threads);
  std::unique_ptr<Model<float>> model;
  all_or_none(world, [&] {
    model = std::make_unique<Model<float>>(cfg, backend, t.micro_batch_size, t.seq_len);
    if (t.init_from.empty())
      model->init(t.seed);
    else
      load_llmc_model(t.init_from, cfg, model->layout(), model->params());
    if (root) prepare_out_dir(o);
  });

  AdamW<float> optimizer(backend, model->layout(),
                         {static_cast<float>(t.beta1), static_cast<float>(t.beta2),
                          static_cast<float>(t.adam_eps), static_cast<float>(t.weight_decay)});
  const LrSchedule schedule{parse_lr_decay(t.lr_schedule), t.lr, t.lr * t.min_lr_ratio,
                            t.warmup_steps, t.steps};
  const SampleOrder order(train_windows->count(), t.seed, t.shuffle);
  const BatchLoader loader(*train_windows, order, t.global_batch_size,
                           t.micro_batch_size, dp.rank(), dp.size());
  MetricsLog log((fs::path(t.out_dir) / "metrics.jsonl").string(), root);

  // MFU: PaLM's 6N + 12 L d T flops per token against the summed peak of all ranks.
  double peak = t.peak_gflops > 0 ? t.peak_gflops : measure_sgemm_gflops(1024, 3);
  dp.all_reduce(&peak, 1, ReduceOp::Sum);
  const double flops_per_token = 6.0 * model->layout().matmul_params() +
                                 12.0 * cfg.n_layer * cfg.d_model * t.seq_len;
  const double tokens_per_step = static_cast<double>(t.global_batch_size) * t.seq_len;

  if (root) {
    std::printf("mpitrain %s | %s L%d H%d KV%d C%d F%d V%d T%d | %s parameters | %zu tokens of "
                "training data\n",
                MPITRAIN_VERSION, to_string(cfg.arch).c_str(), cfg.n_layer, cfg.n_head,
                cfg.n_kv_head, cfg.d_model, cfg.d_ff, cfg.vocab_size, t.seq_len,
                format_count(static_cast<double>(model->num_params())).c_str(),
                static_cast<size_t>(train_src->size()));
    std::printf("%d ranks x %d threads | global batch %d = %d ranks x %d micro-batches x %d | "
                "peak %.1f GFLOP/s in all\n",
                world.size(), threads, t.global_batch_size, world.size(), loader.micro_batches(),
                t.micro_batch_size, peak);
    std::fflush(stdout);
  }

  // ---- the step loop -------------------------------------------------------------------------
  std::vector<int32_t> tokens(static_cast<size_t>(t.micro_batch_size) * t.seq_len);
  std::vector<int32_t> targets(tokens.size());
  const float dloss = static_cast<float>(1.0 / tokens_per_step);  // mean over the global batch
  const size_t n_params = model->num_params();
  for (int step = 0; step < t.steps; ++step) {
    const auto start = std::chrono::steady_clock::now();
    model->zero_grads();
    double loss = 0.0;
    for (int micro = 0; micro < loader.micro_batches(); ++micro) {
      loader.load(step, micro, tokens.data(), targets.data());
      loss += model->forward(tokens.data(), targets.data(), t.micro_batch_size, t.seq_len, dloss);
      model->backward(tokens.data(), t.micro_batch_size, t.seq_len);
    }
    if (dp.size() > 1) dp.all_reduce(model->grads(), n_params, ReduceOp::Sum);
    dp.all_reduce(&loss, 1, ReduceOp::Sum);
    loss /= tokens_per_step;

    const double norm = std::sqrt(backend.sum_squares(model->grads(), n_params));
    const double clip = t.grad_clip > 0 && norm > t.grad_clip ? t.grad_clip / norm : 1.0;
    const double lr = schedule.at(step);
    optimizer.step(model->params(), model->grads(), static_cast<float>(lr), static_cast<float>(clip));

    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens_per_s = tokens_per_step / seconds;
    log.step({step + 1, t.steps, loss, lr, norm, tokens_per_s, 1e3 * seconds,
              flops_per_token * tokens_per_s / (peak * 1e9)});

    const bool last = step + 1 == t.steps;
    if (val_windows && ((t.eval_interval > 0 && (step + 1) % t.eval_interval == 0) || last))
      log.eval(step + 1, evaluate(*model, *val_windows, t.eval_samples, t.micro_batch_size,
                                  t.seq_len, dp, tokens, targets));
  }
  if (val_windows && t.steps == 0)  // evaluation only
    log.eval(0, evaluate(*model, *val_windows, t.eval_samples, t.micro_batch_size, t.seq_len, dp,
                         tokens, targets));

  // ---- after training --------------------------------------------------------------------------
  if (root && !t.export_llmc.empty()) {
    save_llmc_model(t.export_llmc, cfg, model->layout(), model->params(), LlmcDtype::Fp32);
    std::printf("exported the model to %s (llm.c format, fp32)\n", t.export_llmc.c_str());
  }
  if (root && t.sample_tokens > 0) {
    const bool bytes = train_src->tokenizer() == ByteTokenizer::kName;
    std::vector<int32_t> text;
    if (bytes) {
      for (uint32_t id : ByteTokenizer().encode(t.sample_prompt.empty() ? "\n" : t.sample_prompt))
        text.push_back(static_cast<int32_t>(id));
    } else {
      text.push_back(0);
    }
    const size_t prompt = text.size();
    Rng rng(t.seed, rng_stream::kSampling);
    generate(*model, text, t.sample_tokens, t.seq_len, t.sample_temperature, rng);
    std::printf("---- sample (%d tokens, temperature %.2f) ----\n", t.sample_tokens, t.sample_temperature);
    if (bytes) {
      std::printf("%s%s\n", t.sample_prompt.c_str(), ByteTokenizer().decode(text.data() + prompt, text.size() - prompt).c_str());
    } else {
      for (size_t i = prompt; i < text.size(); ++i) std::printf("%d ", text[i]);
      std::printf("\n");
    }
    std::printf("----\n");
    std::fflush(stdout);
  }
  dp.barrier();
}

}  // namespace mpitrain
