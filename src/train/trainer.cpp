#include "mpitrain/train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "mpitrain/backend/cpu_backend.hpp"
#ifdef MPITRAIN_HAVE_CUDA
#include "mpitrain/backend/cuda/device.hpp"
#include "mpitrain/backend/cuda_backend.hpp"
#endif
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/comm/communicator.hpp"
#include "mpitrain/data/samples.hpp"
#include "mpitrain/data/token_source.hpp"
#include "mpitrain/model/llmc_model.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/monitor/memory.hpp"
#include "mpitrain/monitor/output_dir.hpp"
#include "mpitrain/monitor/tensorboard.hpp"
#include "mpitrain/monitor/trace.hpp"
#include "mpitrain/optim/loss_scaler.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/optim/lr_schedule.hpp"
#include "mpitrain/parallel/grad_sync.hpp"
#include "mpitrain/parallel/pipeline_schedule.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/runtime/fault.hpp"
#include "mpitrain/runtime/grid.hpp"
#include "mpitrain/runtime/signals.hpp"
#include "mpitrain/runtime/watchdog.hpp"
#include "mpitrain/train/batch_loader.hpp"
#include "mpitrain/train/comm_groups.hpp"
#include "mpitrain/train/device_setup.hpp"
#include "mpitrain/train/gather.hpp"
#include "mpitrain/train/generate.hpp"
#include "mpitrain/train/metrics.hpp"
#include "mpitrain/train/model_setup.hpp"
#include "mpitrain/train/numeric_guard.hpp"
#include "mpitrain/train/pipeline_runner.hpp"
#include "mpitrain/train/replica_check.hpp"
#include "mpitrain/train/run_setup.hpp"
#include "mpitrain/train/software_check.hpp"
#include "mpitrain/train/update_step.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// Mean loss per token over the first `samples` validation windows; data-parallel rank r takes
// r, r+dp, ... and runs them through its pipeline in batches of up to micro_batch.
double evaluate(PipelineRunner& runner, const SampleWindows& val, int samples, int micro_batch,
                int seq_len, const Grid& grid, Communicator& world, std::vector<int32_t>& tokens,
                std::vector<int32_t>& targets) {
  const int dp = grid.shape().dp;
  const uint64_t total = std::min<uint64_t>(samples, val.count());
  double sums[2] = {0.0, 0.0};  // loss, tokens
  uint64_t next = grid.dp_rank();
  while (next < total) {
    int rows = 0;
    for (; rows < micro_batch && next < total; ++rows, next += dp)
      val.read(next, tokens.data() + rows * seq_len, targets.data() + rows * seq_len);
    const double loss = runner.evaluate(tokens.data(), targets.data(), rows);
    if (grid.last_stage() && grid.tp_rank() == 0) {
      sums[0] += loss;
      sums[1] += static_cast<double>(rows) * seq_len;
    }
  }
  world.all_reduce(sums, 2, ReduceOp::Sum);
  return sums[0] / sums[1];
}

// --device cuda: a head size the kernels take, no host-side compression, a usable GPU
// (UsageError otherwise).
void check_device(const TrainConfig& t, const ModelConfig& cfg) {
  if (t.device != "cuda") return;
  require(cfg.head_size() <= 256, "--device cuda: head size d-model / n-head = " +
                                      std::to_string(cfg.head_size()) + " exceeds 256");
  require(parse_grad_compress(t.grad_compress) == GradCompress::None,
          "--grad-compress " + t.grad_compress + " encodes on the host: --device cpu only");
#ifdef MPITRAIN_HAVE_CUDA
  const cuda::DeviceProbe probe = cuda::probe_devices();
  require(probe.count > 0, "--device cuda: " + probe.reason);
#endif
}

// The backend of --device: the CPU's, or one GPU's (GEMM math from --precision, TF32 by --tf32).
std::unique_ptr<Backend<float>> make_backend([[maybe_unused]] const TrainConfig& t, int threads,
                                             Precision precision) {
#ifdef MPITRAIN_HAVE_CUDA
  if (t.device == "cuda") {
    CudaOptions c;
    c.kernels = parse_kernel_set(t.kernels);
    c.math = precision == Precision::Bf16   ? GemmMath::Bf16
             : precision == Precision::Fp16 ? GemmMath::Fp16
             : t.tf32                       ? GemmMath::Tf32
                                            : GemmMath::Fp32;
    c.workspace_bytes = static_cast<size_t>(t.gpu_workspace_mb * (1 << 20));
    return std::make_unique<CudaBackend<float>>(c);
  }
#endif
  return std::make_unique<CpuBackend<float>>(threads, precision);
}

// GFLOP/s of the backend's matmul_forward (in its GEMM math) on n x n x n, inputs of ordinary
// magnitude: the MFU peak of a device. Runs before the memory is sealed; frees what it takes.
double measure_matmul_gflops(Backend<float>& backend, int n, int repeats) {
  const size_t nn = static_cast<size_t>(n) * n;
  float* a = backend.alloc(3 * nn);  // inp, weight, out
  std::vector<float> inputs(2 * nn);
  for (size_t i = 0; i < inputs.size(); ++i) inputs[i] = static_cast<float>(i % 17) / 17 - 0.5f;
  backend.upload(a, inputs.data(), inputs.size());
  float sink = 0.0f;
  backend.matmul_forward(a + 2 * nn, a, a + nn, nullptr, n, n, n);  // the algorithm is picked
  backend.download(&sink, a + 2 * nn, 1);                            // waits for the device
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) backend.matmul_forward(a + 2 * nn, a, a + nn, nullptr, n, n, n);
  backend.download(&sink, a + 2 * nn, 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  backend.free(a);
  return 2.0 * n * nn * repeats / s / 1e9;
}

// Host copies of the buffers a checkpoint reads and writes when they live on a device: the state
// points at the copies; download() before a save, upload() after a load.
class CheckpointMirror {
 public:
  CheckpointMirror(Backend<float>& backend, CheckpointState& state) : backend_(backend) {
    const bool separate_master = state.master != state.params + state.lo;
    const size_t n = state.hi - state.lo;
    mirror(state.params, state.layout.total());
    if (separate_master) mirror(state.master, n);
    else state.master = state.params + state.lo;
    for (float*& b : state.state) mirror(b, n);
  }
  void download() {
    for (Buffer& b : buffers_) backend_.download(b.host.data(), b.device, b.host.size());
  }
  void upload() {
    for (Buffer& b : buffers_) backend_.upload(b.device, b.host.data(), b.host.size());
  }

 private:
  struct Buffer {
    float* device;
    std::vector<float> host;
  };
  void mirror(float*& p, size_t n) {
    buffers_.push_back({p, std::vector<float>(n)});
    p = buffers_.back().host.data();  // a vector's storage stays put when the vector moves
  }
  Backend<float>& backend_;
  std::vector<Buffer> buffers_;
};

std::string format_count(double n) {
  char buf[32];
  if (n >= 1e9) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%.1fK", n / 1e3);
  return buf;
}

}  // namespace

int train(const Options& o, const MpiComm& world) {
  const TrainConfig& t = o.train;
  const bool root = world.rank() == 0;
  FaultPlan faults;
  all_or_none(world, [&] { faults = FaultPlan::from_env(); });
  // Loud, before any work: a plan exported into a production job must not go unnoticed.
  if (root && faults.armed()) std::fprintf(stderr, "%s\n", faults.warning().c_str());
  // The same build, libraries and configuration on every rank, before anything can differ.
  check_software(world, o.effective, faults);

  // ---- set-up: every check before any work; a failure on any rank stops all alike ----------
  GridShape shape;
  std::vector<int> stage_first_layer;
  PipelineSchedule schedule{};
  std::unique_ptr<TokenSource> train_src, val_src;
  std::unique_ptr<SampleWindows> train_windows, val_windows;
  ModelConfig cfg;
  all_or_none(world, [&] {
    shape = resolve_grid(world.size(), t.dp, t.tp, t.pp);
    schedule = parse_pipeline_schedule(t.pp_schedule);
    parse_lr_decay(t.lr_schedule);
    const TokenFormat format = parse_token_format(t.data_format);
    train_src = open_tokens(t.train_data, format);
    if (!t.val_data.empty()) val_src = open_tokens(t.val_data, format);
    cfg = resolve_model_config(o, *train_src);
    check_device(t, cfg);
    check_tensor_parallel(cfg, shape.tp);
    stage_first_layer = pipeline_layer_split(cfg.n_layer, shape.pp, t.pp_layers);
    // (auto: the plan takes a divisor of global-batch-size / dp)
    require(t.micro_batch_size == 0 ||
                t.global_batch_size % (shape.dp * t.micro_batch_size) == 0,
            "global-batch-size " + std::to_string(t.global_batch_size) +
                " must be divisible by dp x micro-batch-size = " + std::to_string(shape.dp) +
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

  const Grid grid(world, shape);
  const ParamLayout full_layout(cfg);  // the whole model, as one rank would hold it
  CommGroups comms(world, grid);  // host communicators now, device ones below
  MpiCommunicator& world_comm = comms.world;
  DeviceSetup devices = setup_devices(t, grid, world);  // GPU choice and table, --comm, power

  const int threads = resolve_threads(t.threads, grid.local_size());
  const ModelOptions model_options{parse_precision(t.precision), parse_recompute(t.recompute)};
  // --trace and --tensorboard directories: checked before the out-dir is written, created after it
  // (they may lie inside it).
  all_or_none(world, [&] {
    require_creatable_dir(t.trace, "trace");
    require_creatable_dir(t.tensorboard, "tensorboard");
  });
  std::unique_ptr<Backend<float>> backend;
  std::unique_ptr<Model<float>> model;
  double device_peak = 0.0;  // --device cuda: GFLOP/s of its GEMMs, measured unless given
  all_or_none(world, [&] {
    require((faults.kind() != FaultKind::Nan && faults.kind() != FaultKind::Drift) ||
                t.device == "cpu",
            "MPITRAIN_FAULT nan / drift write host memory: --device cpu only");
    backend = make_backend(t, threads, model_options.precision);
#ifdef MPITRAIN_HAVE_CUDA
    if (auto* gpu = dynamic_cast<CudaBackend<float>*>(backend.get()); gpu && root)
      std::printf("device: %s\n", gpu->describe().c_str());
#endif
    if (!backend->host_memory() && t.peak_gflops == 0)
      device_peak = measure_matmul_gflops(*backend, 4096, 5);
  });
  // The micro-batch (--micro-batch-size auto: planned against the memory left now).
  const int micro_batch = resolve_micro_batch(t, cfg, shape, grid, world);
  const int micro_batches = t.global_batch_size / (shape.dp * micro_batch);
  const int slots = pipeline_slots(schedule, micro_batches, shape.pp, grid.pp_rank());
  const ModelShard shard = shard_of(shape, stage_first_layer, grid.tp_rank(), grid.pp_rank());
#ifdef MPITRAIN_HAVE_CUDA
  if (auto* gpu = dynamic_cast<CudaBackend<float>*>(backend.get()))  // tensors cross ranks
    all_or_none(world, [&] {
      comms.use_device(devices.comm, gpu->stream(),
                       data_call_sizes(cfg, shard, micro_batch, t.seq_len, slots, t.bucket_mb,
                                       t.zero == 1),
                       std::max(t.comm_timeout, t.comm_timeout_startup));
    });
#endif
  // A call blocked longer than --comm-timeout(-startup), or NCCL work incomplete that long, is
  // reported and ends the job (exit 3); so does an NCCL error.
  Watchdog watchdog(world, {t.comm_timeout_startup, t.comm_timeout}, comms.host_logs(),
                    comms.device_work());
  const std::vector<Communicator*> blocking = comms.blocking();
  all_or_none(world, [&] {
    model = std::make_unique<Model<float>>(cfg, *backend, shard, micro_batch, t.seq_len, slots,
                                           &comms.tp_data(), model_options);
    if (t.init_from.empty()) {
      model->init(t.seed);
    } else {
      std::vector<float> full(full_layout.total()), local(model->num_params());
      load_llmc_model(t.init_from, cfg, full_layout, full.data());
      for (const ParamTensor& p : model->layout().tensors())
        take_shard(p, full.data() + full_layout.tensors()[p.global_index].offset,
                   local.data() + p.offset);
      backend->upload(model->params(), local.data(), local.size());
    }
    require(faults.kind() != FaultKind::Nan || faults.layer() < cfg.n_layer,
            "MPITRAIN_FAULT: layer " + std::to_string(faults.layer()) + " is not below n-layer " +
                std::to_string(cfg.n_layer));
    if (root) prepare_out_dir(o);
  });
  TraceRecorder trace;
  std::unique_ptr<TensorBoardWriter> tensorboard;
  all_or_none(world, [&] {
    if (!t.trace.empty())
      trace.open(t.trace, world.rank(),
                 "rank " + std::to_string(world.rank()) + " (dp " + std::to_string(grid.dp_rank()) +
                     " tp " + std::to_string(grid.tp_rank()) + " pp " +
                     std::to_string(grid.pp_rank()) + ")");
    if (root && !t.tensorboard.empty()) tensorboard = std::make_unique<TensorBoardWriter>(t.tensorboard);
  });
  const std::function<double()> blocked_seconds = [&] {  // over every communicator, since the reset
    double s = 0.0;
    for (Communicator* c : blocking) s += c->blocked_seconds();
    return s;
  };

  const OptimizerConfig optimizer_config{
      parse_optimizer(t.optimizer), static_cast<float>(t.beta1), static_cast<float>(t.beta2),
      static_cast<float>(t.adam_eps), static_cast<float>(t.momentum),
      static_cast<float>(t.weight_decay)};
  const LrSchedule lr_schedule{parse_lr_decay(t.lr_schedule), t.lr, t.lr * t.min_lr_ratio,
                               t.warmup_steps, t.steps};
  const SampleOrder order(train_windows->count(), t.seed, t.shuffle);
  const BatchLoader loader(*train_windows, order, t.global_batch_size, micro_batch,
                           grid.dp_rank(), shape.dp);
  PipelineRunner runner(*model, &comms.pp_data(), schedule, micro_batches, micro_batch, t.seq_len,
                        &trace, blocked_seconds);
  GradBuckets buckets(comms.dp_data(), model->grads(), model->num_params(),
                      static_cast<size_t>(t.bucket_mb * (1 << 20)),
                      {t.zero == 1, parse_grad_compress(t.grad_compress), t.topk_ratio});
  // The optimizer updates this rank's range of the parameters (all of them without ZeRO-1), from
  // fp32 master weights taken before the compute copy is rounded to the run's precision. Its
  // norms are host vectors: the host communicators.
  const bool tied_copies = cfg.tied_embeddings() && shape.pp > 1 && comms.embedding;
  const FlatRange own = buckets.owned();
  backend->set_alloc_kind(AllocKind::Optimizer);
  Optimizer optimizer(*backend, model->layout(), optimizer_config, model->params(), own.lo, own.hi,
                      model_options.precision,
                      {t.zero ? &comms.dp : nullptr, &comms.tp,
                       tied_copies ? &*comms.embedding : nullptr});
  backend->set_alloc_kind(AllocKind::Activations);
  backend->round_to(model->params(), model->num_params(), model_options.precision);
#ifdef MPITRAIN_HAVE_CUDA
  if (auto* gpu = dynamic_cast<CudaBackend<float>*>(backend.get())) {  // the footprint is fixed
    gpu->seal_memory();
    if (root) std::printf("%s\n", gpu->memory_report().c_str());
  }
#endif
  LossScaler scaler({model_options.precision == Precision::Fp16, t.initial_loss_scale,
                     t.loss_scale_window, t.min_loss_scale});
  NumericGuard guard(parse_nan_policy(t.on_nan), t.out_dir, world_comm);
  UpdateStep update(*model, buckets, optimizer, scaler, guard,
                    {&world_comm, tied_copies ? comms.embedding_data() : nullptr,
                     t.zero == 1 || grid.dp_rank() == 0},
                    t.grad_clip, &trace);

  // ---- resume -----------------------------------------------------------------------------------
  CheckpointStore store((fs::path(t.out_dir) / "checkpoints").string(), world, t.keep_last, faults);
  CheckpointState state = checkpoint_state(cfg, model->layout(), model->params(), optimizer,
                                           t.zero == 1 || grid.dp_rank() == 0);
  std::optional<CheckpointMirror> mirror;  // on a device; the CPU path reads and writes in place
  if (!backend->host_memory()) mirror.emplace(*backend, state);
  std::vector<float> params_copy;  // on a device: the parameters for the replica check
  const auto host_params = [&]() -> const float* {
    if (backend->host_memory()) return model->params();
    params_copy.resize(model->num_params());
    backend->download(params_copy.data(), model->params(), params_copy.size());
    return params_copy.data();
  };
  int start_step = 0;
  uint64_t consumed = 0;                                      // samples of the global order used
  double best_val = std::numeric_limits<double>::quiet_NaN();  // for --save-best
  if (!t.resume.empty()) {
    std::optional<CheckpointManifest> m;
    all_or_none(world, [&] {
      // The store refuses a checkpoint of another model (UsageError naming the difference).
      m = t.resume == "auto" ? store.load_latest(state) : store.load(t.resume, state);
    });
    if (m) {
      if (mirror) mirror->upload();
      start_step = static_cast<int>(m->step);
      consumed = m->consumed_samples;
      best_val = m->val_loss;
      optimizer.set_steps_taken(static_cast<int>(m->adam_steps));
      scaler.restore(m->loss_scale, m->loss_scale_clean_steps, m->skipped_steps);
      if (root) std::printf("resumed from step %d (%llu samples consumed, written by %s at %s)\n",
                            start_step, static_cast<unsigned long long>(consumed),
                            m->build_id.c_str(), m->wall_time.c_str());
    } else if (root) {
      std::printf("no checkpoint to resume from: starting fresh\n");
    }
  }
  auto manifest = [&](int step) {
    CheckpointManifest m;
    m.step = step;
    m.consumed_samples = consumed;
    m.seed = t.seed;
    m.adam_steps = optimizer.steps_taken();
    m.loss_scale = scaler.scale();
    m.loss_scale_clean_steps = scaler.clean_steps();
    m.skipped_steps = update.skipped_steps();
    m.val_loss = best_val;
    m.model = cfg;
    m.layout = shape;
    m.pp_layers = t.pp_layers;
    m.global_batch_size = t.global_batch_size;
    m.micro_batch_size = micro_batch;
    m.seq_len = t.seq_len;
    return m;
  };
  MetricsLog log((fs::path(t.out_dir) / "metrics.jsonl").string(), root,
                 t.resume.empty() ? -1 : start_step, std::move(tensorboard));
  const std::string report_path = (fs::path(t.out_dir) / "report.json").string();

  // MFU: PaLM's 6N + 12 L d T flops per token against the summed peak of all ranks.
  double peak = t.peak_gflops > 0         ? t.peak_gflops
                : !backend->host_memory() ? device_peak
                                          : measure_sgemm_gflops(1024, 3);
  world_comm.all_reduce(&peak, 1, ReduceOp::Sum);
  const double flops_per_token = 6.0 * full_layout.matmul_params() +
                                 12.0 * cfg.n_layer * cfg.d_model * t.seq_len;
  const double tokens_per_step = static_cast<double>(t.global_batch_size) * t.seq_len;
  // What each rank holds (the largest of all ranks): parameters and gradients, optimizer state
  // (with the fp32 master under bf16/fp16; 1/dp of it with ZeRO-1), activations.
  double held_bytes[3] = {2.0 * sizeof(float) * model->num_params(),
                          static_cast<double>(optimizer.bytes()),
                          static_cast<double>(model->activation_bytes())};
  world_comm.all_reduce(held_bytes, 3, ReduceOp::Max);

  if (root) {
    std::printf("mpitrain %s | %s L%d H%d KV%d C%d F%d V%d T%d | %s parameters | %zu tokens of "
                "training data\n",
                MPITRAIN_VERSION, to_string(cfg.arch).c_str(), cfg.n_layer, cfg.n_head,
                cfg.n_kv_head, cfg.d_model, cfg.d_ff, cfg.vocab_size, t.seq_len,
                format_count(static_cast<double>(full_layout.total())).c_str(),
                static_cast<size_t>(train_src->size()));
    std::printf("%d ranks = dp %d x tp %d x pp %d, %d threads each | global batch %d = dp %d x %d "
                "micro-batches x %d | peak %.1f GFLOP/s in all\n",
                world.size(), shape.dp, shape.tp, shape.pp, threads, t.global_batch_size,
                shape.dp, micro_batches, micro_batch, peak);
    std::printf("per rank (at most): parameters and gradients %.2f MiB | optimizer state %.2f MiB "
                "(%s%s) | activations %.2f MiB (%s, recompute %s)",
                held_bytes[0] / (1 << 20), held_bytes[1] / (1 << 20),
                to_string(optimizer_config.kind).c_str(), t.zero ? ", ZeRO-1" : "",
                held_bytes[2] / (1 << 20), t.precision.c_str(), t.recompute.c_str());
    if (shape.pp > 1)
      std::printf(" | pipeline %s, %d stages, bubble (pp-1)/(m+pp-1) = %.1f%%",
                  to_string(schedule).c_str(), shape.pp,
                  100.0 * pipeline_bubble(micro_batches, shape.pp));
    if (shape.dp > 1) std::printf(" | %zu gradient buckets", buckets.buckets());
    std::printf("\n");
    std::fflush(stdout);
  }

  // ---- the step loop -------------------------------------------------------------------------
  std::vector<int32_t> tokens(static_cast<size_t>(micro_batch) * t.seq_len);
  std::vector<int32_t> targets(tokens.size());
  const float dloss = static_cast<float>(1.0 / tokens_per_step);  // mean over the global batch
  const bool counts_loss = grid.last_stage() && grid.tp_rank() == 0;
  const PipelineRunner::Loader load = [&](int micro, int32_t* tok, int32_t* tgt) {
    loader.load(consumed, micro, tok, tgt);
  };
  const std::function<void(size_t)> grads_ready = [&](size_t offset) { update.grads_ready(offset); };
  StopSignals signals;
  const auto run_start = std::chrono::steady_clock::now();
  double slowest_step = 0.0, last_save = 0.0;  // seconds, for --exit-after-minutes
  auto save = [&](int step) {
    TraceScope io(&trace, TraceLane::Io, "checkpoint save", nullptr, step);
    const auto t0 = std::chrono::steady_clock::now();
    if (mirror) mirror->download();
    store.save(manifest(step), state);
    last_save = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    log.checkpoint(last_save);
    if (root) std::printf("saved checkpoint step %d in %.2f s\n", step, last_save), std::fflush(stdout);
  };
  trace.start(world_comm);  // the timelines' common zero
  for (int step = start_step; step < t.steps; ++step) {
    TraceScope step_region(&trace, TraceLane::Compute, "step", nullptr, step + 1);
    const auto start = std::chrono::steady_clock::now();
    const double energy_start = devices.power ? devices.power->energy_joules() : 0.0;
    watchdog.step_started(step + 1);
    faults.at("step", world.rank(), step + 1);  // MPITRAIN_FAULT=hang / kill:phase=step
    for (Communicator* c : blocking) c->reset_blocked_seconds();
    comms.dp_data().reset_bytes_sent();
    model->zero_grads();
    apply_nan_fault(faults, model->layout(), model->grads(), world.rank(), step + 1);  // tests
    double loss = runner.train(load, static_cast<float>(dloss * scaler.scale()), grads_ready);
    const double lr = lr_schedule.at(step);
    const UpdateResult result = update.apply(lr, counts_loss ? loss : 0.0, step + 1);
    if (result.verdict == StepVerdict::Stop) {
      log.finish(report_path, update.skipped_steps(), kExitFailure);
      trace.close();
      return kExitFailure;
    }
    const double norm = result.grad_norm, optimizer_seconds = update.optimizer_seconds();
    // Replica drift: every --check-replicas steps the data-parallel copies must be identical.
    apply_drift_fault(faults, model->layout(), model->params(), world.rank(), step + 1);
    if (t.check_replicas > 0 && (step + 1) % t.check_replicas == 0 &&
        !replicas_agree(model->layout(), host_params(), comms.dp, world_comm, step + 1)) {
      log.finish(report_path, update.skipped_steps(), kExitFailure);
      trace.close();
      return kExitFailure;
    }
    loss = result.loss_sum / tokens_per_step;
    consumed += t.global_batch_size;

    const double exposed_comm_seconds = blocked_seconds();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens_per_s = tokens_per_step / seconds;
    double rss = peak_rss_mib();
    world_comm.all_reduce(&rss, 1, ReduceOp::Max);
    double joules = -1.0;  // all GPUs' energy in the step, where every GPU has a meter
    if (devices.power_everywhere) {
      joules = devices.power ? devices.power->energy_joules() - energy_start : 0.0;
      world_comm.all_reduce(&joules, 1, ReduceOp::Sum);
    }
    const PipelineRunner::Times& pass = runner.times();
    log.step({step + 1, t.steps, loss, lr, norm, tokens_per_s, 1e3 * seconds,
              1e3 * exposed_comm_seconds, flops_per_token * tokens_per_s / (peak * 1e9),
              1e3 * pass.forward, 1e3 * pass.backward, 1e3 * optimizer_seconds, 1e3 * pass.data,
              rss, comms.dp_data().bytes_sent(), scaler.scale(), update.skipped_steps(), joules});
    watchdog.step_finished();

    slowest_step = std::max(slowest_step, seconds);

    const bool last = step + 1 == t.steps;
    if (val_windows && ((t.eval_interval > 0 && (step + 1) % t.eval_interval == 0) || last)) {
      const double val = evaluate(runner, *val_windows, t.eval_samples, micro_batch, t.seq_len,
                                  grid, world_comm, tokens, targets);
      log.eval(step + 1, val);
      if (t.save_best && !(val >= best_val)) {  // also when best_val is NaN (none yet)
        best_val = val;
        double seconds_best = 0.0;
        {
          TraceScope io(&trace, TraceLane::Io, "checkpoint save best", &seconds_best, step + 1);
          if (mirror) mirror->download();
          store.save_as("best", manifest(step + 1), state);
        }
        log.checkpoint(seconds_best);
      }
    }
    // Stop requests (signals on any rank, or the time limit) are agreed on here, between steps.
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
    const bool time_up = t.exit_after_minutes > 0 &&
                         elapsed + 2 * slowest_step + 2 * last_save >= 60 * t.exit_after_minutes;
    // Each reason separately, so every rank (and the message) knows all of them.
    int64_t reasons[3] = {t.exit_at_step > 0 && step + 1 == t.exit_at_step, time_up,
                          signals.requested()};
    world_comm.all_reduce(reasons, 3, ReduceOp::Max);
    const bool stop = reasons[0] || reasons[1] || reasons[2];
    if ((t.save_interval > 0 && ((step + 1) % t.save_interval == 0 || last)) || stop) save(step + 1);
    if (stop && !last) {
      if (root) std::printf("stopping after step %d (%s): checkpoint saved; exit %d = requeue me\n",
                            step + 1, reasons[0] ? "exit-at-step" : reasons[1] ? "time limit" : "signal",
                            kExitRequeue);
      log.finish(report_path, update.skipped_steps(), kExitRequeue);
      trace.close();
      return kExitRequeue;
    }
  }
  if (val_windows && t.steps == 0)  // evaluation only
    log.eval(0, evaluate(runner, *val_windows, t.eval_samples, micro_batch, t.seq_len, grid,
                         world_comm, tokens, targets));
  log.finish(report_path, update.skipped_steps(), kExitOk);
  trace.close();

  // ---- after training: the whole model on rank 0 for export and the text sample ----------------
  const bool want_full = !t.export_llmc.empty() || !t.export_params.empty() || t.sample_tokens > 0;
  if (!want_full) return kExitOk;
  std::vector<float> full = gather_parameters(*model, grid, stage_first_layer, world);
  if (!root) return kExitOk;
  if (!t.export_llmc.empty()) {
    save_llmc_model(t.export_llmc, cfg, full_layout, full.data(), LlmcDtype::Fp32);
    std::printf("exported the model to %s (llm.c format, fp32)\n", t.export_llmc.c_str());
  }
  if (!t.export_params.empty()) {
    write_parameters_hdf5(t.export_params, cfg, full);
    std::printf("wrote the parameters to %s\n", t.export_params.c_str());
  }
  if (t.sample_tokens > 0) {
    if (backend->host_memory()) {
      print_sample(t, cfg, full, train_src->tokenizer(), *backend);
    } else {  // the device's memory is sealed: the sample runs on the CPU
      CpuBackend<float> cpu(threads);
      print_sample(t, cfg, full, train_src->tokenizer(), cpu);
    }
  }
  return kExitOk;
}

}  // namespace mpitrain
