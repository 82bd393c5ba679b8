// The Trainer's set-up: every check before any work (a failure on any rank stops all alike),
// then the parts the step loop calls, then the banner.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <utility>

#include "mpitrain/backend/cpu_backend.hpp"
#include "mpitrain/train/trainer.hpp"
#ifdef MPITRAIN_HAVE_CUDA
#include "mpitrain/backend/cuda/device.hpp"
#include "mpitrain/backend/cuda_backend.hpp"
#endif
#include "mpitrain/backend/bf16_gemm_rate.hpp"
#include "mpitrain/backend/memory_bandwidth.hpp"
#include "mpitrain/backend/profiling_backend.hpp"
#include "mpitrain/backend/sgemm_rate.hpp"
#include "mpitrain/io/shortest_text.hpp"
#include "mpitrain/model/hf_model.hpp"
#include "mpitrain/model/llmc_model.hpp"
#include "mpitrain/model/summary.hpp"
#include "mpitrain/monitor/output_dir.hpp"
#include "mpitrain/monitor/peak_cache.hpp"
#include "mpitrain/monitor/report.hpp"
#include "mpitrain/planner/timing.hpp"
#include "mpitrain/runtime/affinity.hpp"
#include "mpitrain/runtime/agree.hpp"
#include "mpitrain/train/gather.hpp"
#include "mpitrain/train/kept_settings.hpp"
#include "mpitrain/train/model_setup.hpp"
#include "mpitrain/train/run_record.hpp"
#include "mpitrain/train/run_setup.hpp"
#include "mpitrain/train/sample_tokenizer.hpp"
#include "mpitrain/train/software_check.hpp"
#include "mpitrain/train/work_check.hpp"

namespace fs = std::filesystem;

namespace mpitrain {

namespace {

// --device cuda: a head size the kernels take, no host-side compression, a usable GPU
// (UsageError otherwise).
void check_device(const TrainConfig& t, const ModelConfig& cfg) {
  if (t.device != "cuda") return;
  require(!t.profile_ops,
          "--profile-ops times the CPU backend's ops, which finish before they return; a GPU's "
          "run asynchronously: profile them with Nsight Systems (nsys) or see --trace");
  require(cfg.head_size() <= 256, "--device cuda: head size (head-dim, or d-model / n-head) " +
                                      std::to_string(cfg.head_size()) + " exceeds 256");
  require(parse_grad_compress(t.grad_compress) == GradCompress::None,
          "--grad-compress " + t.grad_compress + " encodes on the host: --device cpu only");
  // (after a resume took its checkpoint's precision)
  require(!t.tf32 || t.precision == "fp32", "--tf32 lets fp32 GEMMs run as TF32, and precision " +
                                                t.precision + " runs them in " + t.precision +
                                                ": leave one of them out");
#ifdef MPITRAIN_HAVE_CUDA
  const cuda::DeviceProbe probe = cuda::probe_devices();
  require(probe.count > 0, "--device cuda: " + probe.reason);
#endif
}

// --ep: a mixture-of-experts model whose experts and dp ranks it divides, without what does
// not take expert-split gradients yet (UsageError otherwise, before any work). Under ZeRO the
// expert ranges are sharded over expert-dp, the rest over dp (not with hybrid sharding).
void check_expert_parallel(const TrainConfig& t, const ModelConfig& cfg, const GridShape& shape) {
  if (t.ep == 1) return;
  const std::string ep = "--ep " + std::to_string(t.ep);
  require(cfg.n_experts > 0, ep + " splits the routed experts: it needs a mixture-of-experts "
                                  "model (--n-experts > 0)");
  require(cfg.n_experts % t.ep == 0, ep + " does not divide the " +
                                         std::to_string(cfg.n_experts) + " experts");
  require(shape.dp % t.ep == 0, ep + " does not divide the data-parallel size " +
                                    std::to_string(shape.dp) + ": use a divisor of it");
  require(t.zero < 2 || t.zero_shard_size == 0 || t.zero_shard_size == shape.dp * shape.cp,
          ep + " with hybrid sharding (--zero-shard-size " + std::to_string(t.zero_shard_size) +
              ") is not supported (the expert ranges are sharded over the whole "
              "expert-data-parallel group): use --zero-shard-size 0");
  require(parse_grad_compress(t.grad_compress) == GradCompress::None,
          ep + " with --grad-compress " + t.grad_compress + " is not supported: use none");
}

// The backend of --device: the CPU's, or the GPU setup_devices chose for this rank.
std::unique_ptr<Backend<float>> make_backend(const TrainConfig& t, int threads, Precision precision,
                                             [[maybe_unused]] const DeviceSetup& devices) {
#ifdef MPITRAIN_HAVE_CUDA
  if (t.device == "cuda")
    return std::make_unique<CudaBackend<float>>(cuda_options(t, precision, devices));
#endif
  return std::make_unique<CpuBackend<float>>(threads, precision,
                                             t.huge_pages ? CpuPages::Huge : CpuPages::Base);
}

// How the compute tensors are held under `precision`: in 2 bytes where the backend stores them,
// else fp32 containers rounded by the model (the emulated path).
// MPITRAIN_PRECISION_STORAGE=fp32 asks for the emulated path: the tests' oracle.
Precision compute_storage(Precision precision, const Backend<float>& backend) {
  const char* forced = std::getenv("MPITRAIN_PRECISION_STORAGE");
  if (forced != nullptr && std::string(forced) == "fp32") return Precision::Fp32;
  return backend.stores(precision) ? precision : Precision::Fp32;
}

// Whether checkpoints go through host copies (train/checkpoint_mirror.hpp): a device's state,
// or MPITRAIN_CHECKPOINT_MIRROR=1 on the CPU, which takes that path with host memory (tests).
bool checkpoints_mirrored(const Backend<float>& backend) {
  const char* forced = std::getenv("MPITRAIN_CHECKPOINT_MIRROR");
  return !backend.host_memory() || (forced != nullptr && std::string(forced) == "1");
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
  backend.download(&sink, a + 2 * nn, 1);                           // waits for the device
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) backend.matmul_forward(a + 2 * nn, a, a + nn, nullptr, n, n, n);
  backend.download(&sink, a + 2 * nn, 1);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  backend.free(a);
  return 2.0 * n * nn * repeats / s / 1e9;
}

}  // namespace

Trainer::Trainer(const Options& options, const MpiComm& world, const StopSignals& signals)
    : options_(options),
      t_(options_.train),
      world_(world),
      root_(world.rank() == 0),
      signals_(signals) {
  all_or_none(world_, [&] { faults_ = FaultPlan::from_env(); });
  // Loud, before any work: a plan exported into a production job must not go unnoticed.
  if (root_ && faults_.armed()) std::fprintf(stderr, "%s\n", faults_.warning().c_str());
  // The same build, libraries and configuration on every rank, before anything can differ.
  check_software(world_, options_.effective, faults_);
  check_inputs();
  stop_if_requested(signals_, world_, "MPI start-up and the input and data checks");
  lock_out_dir();
  build_model();
  stop_if_requested(signals_, world_, "building the model");
  build_step_parts();
  print_banner();
}

Trainer::~Trainer() = default;

std::string Trainer::checkpoints_dir() const {
  return (fs::path(t_.out_dir) / "checkpoints").string();
}

void Trainer::check_inputs() {
  all_or_none(world_, [&] {
    shape_ = resolve_grid(world_.size(), t_.dp, t_.tp, t_.pp, layouts_the_model_admits(options_),
                          t_.cp);
    if (t_.cp > 1) chunks_.emplace(t_.seq_len, t_.cp, 0);  // checks 2 cp divides seq-len
    require(t_.zero_shard_size == 0 || t_.zero >= 2,
            "zero-shard-size " + std::to_string(t_.zero_shard_size) +
                " (hybrid sharding) needs --zero 2 or 3");
    require(t_.zero_shard_size == 0 || shape_.dp * shape_.cp % t_.zero_shard_size == 0,
            "zero-shard-size " + std::to_string(t_.zero_shard_size) +
                " does not divide the data-parallel size " + std::to_string(shape_.dp * shape_.cp) +
                ": use a divisor of it, or 0 (shard over the whole data-parallel group)");
    if (t_.zero == 3 && t_.check_replicas > 0) {  // no copies to compare: the default goes off
      require(!options_.was_given("check-replicas"),
              "check-replicas compares the data-parallel copies of the parameters, and under "
              "--zero 3 each rank holds only its own piece of them: use --zero 2 or less, or "
              "--check-replicas 0");
      options_.train.check_replicas = 0;
    }
    std::string given_otherwise;  // kept settings given with other values than the checkpoint's
    if (!t_.resume.empty() && t_.resume != "auto") {  // every rank finds the same
      resume_source_ = find_resume_source(t_.resume);
      given_otherwise =
          take_checkpoint_settings(options_, resume_source_->manifest, t_.resume, shape_.dp);
    } else if (t_.resume == "auto") {  // the same settings from the checkpoint it would load
      const std::string dir = checkpoints_dir();
      std::string damage;  // none readable: the load names the damage (or --overwrite)
      if (const std::optional<CheckpointManifest> m = first_manifest(dir, damage))
        given_otherwise = take_checkpoint_settings(options_, *m, dir, shape_.dp);
    }
    if (root_ && !given_otherwise.empty())
      std::printf("resume: given otherwise than the checkpoint's run: %s\n",
                  given_otherwise.c_str());
    schedule_ = parse_pipeline_schedule(t_.pp_schedule);
    parse_wsd_decay(t_.lr_wsd_decay_style);
    const bool wsd = parse_lr_decay(t_.lr_schedule) == LrDecay::Wsd;  // (after the kept settings)
    const std::string unused = " shapes lr-schedule wsd's decay, and lr-schedule is " +
                               t_.lr_schedule + ": give lr-schedule wsd, or leave it out";
    const TrainConfig defaults;
    options_.require_used(wsd, "lr-wsd-decay-steps", t_.lr_wsd_decay_steps,
                          defaults.lr_wsd_decay_steps, unused);
    options_.require_used(wsd, "lr-wsd-decay-style", t_.lr_wsd_decay_style,
                          defaults.lr_wsd_decay_style, unused);
    const TokenFormat format = parse_token_format(t_.data_format);
    if (!t_.train_data.empty())
      train_.emplace(parse_data_spec(t_.train_data, "train-data"), format, t_.seq_len, "train-data");
    if (!t_.val_data.empty()) {
      val_.emplace(parse_data_spec(t_.val_data, "val-data"), format, t_.seq_len, "val-data");
      val_windows_ = &val_->all();
      if (root_ && val_windows_->count() < static_cast<uint64_t>(t_.eval_samples))
        std::printf(
            "eval-samples %d: the val-data hold %llu sequences of seq-len %d; each "
            "evaluation reads them all\n",
            t_.eval_samples, static_cast<unsigned long long>(val_windows_->count()), t_.seq_len);
    }
    const TokenSource* train_first = train_ ? &train_->first() : nullptr;
    SampleTokenizer chosen =
        choose_sample_tokenizer(t_.tokenizer, train_first,
                                resume_source_ ? resume_source_->run_dir : "",
                                val_ ? &val_->first() : nullptr);
    tokenizer_ = std::move(chosen.tokenizer);
    tokenizer_descriptor_ = chosen.descriptor;
    require(t_.document_mask || !t_.document_positions,
            "--document-positions counts each position from its document's start: it needs "
            "--document-mask");
    const auto boundary = [&](const std::string& option) {  // the data's documents' boundary
      require(tokenizer_ != nullptr,
              "--" + option +
                  ": no tokenizer is known for the data (they record none), so their documents "
                  "cannot be found: give --tokenizer PATH");
      for (const auto* data : {train_ ? &*train_ : nullptr, val_ ? &*val_ : nullptr})
        if (const TokenSource* f = data ? data->documents_unmarked() : nullptr)
          throw UsageError(
              "--" + option + ": '" + f->path() +
              "' holds conversations that the document boundary does not mark (" +
              describe(document_boundary(*tokenizer_, option), *tokenizer_) +
              ", and their chat template puts that token inside them, as Qwen's <|im_end|> at "
              "every turn's end, or leaves it out), so the documents it finds are not the "
              "conversations: leave --" + option + " out (packed conversations then attend to "
              "the ones before them in their window)");
      return document_boundary(*tokenizer_, option);
    };
    if (t_.document_mask) documents_ = boundary("document-mask");
    if (t_.mask_boundary_loss) loss_boundary_ = boundary("mask-boundary-loss").token;
    loss_masked_ = loss_boundary_ || (train_ && train_->loss_masked_files() > 0);
    // The training data's recorded tokenizer sets the vocabulary of files that declare none
    // (llm.c, nanoGPT): usually the sample's, read once.
    const std::string data_tokenizer =
        train_first ? tokenizer_descriptor_of(train_first->path()) : "";
    const int64_t tokenizer_vocab =
        data_tokenizer.empty()                  ? -1
        : data_tokenizer == tokenizer_descriptor_ ? tokenizer_->vocab_size()
                                                  : load_tokenizer(data_tokenizer)->vocab_size();
    cfg_ = resolve_model_config(options_, train_first, tokenizer_vocab);
    const std::string router = take_router_settings(options_, cfg_);  // the aux loss's form
    if (root_ && !router.empty()) std::printf("%s\n", router.c_str());
    const std::string yarn = describe_yarn_factor(options_, cfg_);
    if (root_ && !yarn.empty()) std::printf("%s\n", yarn.c_str());
    check_work(options_, cfg_, tokenizer_.get(), resume_source_ ? &*resume_source_ : nullptr);
    check_device(t_, cfg_);
    check_tensor_parallel(cfg_, shape_.tp);
    check_sequence_parallel(t_, shape_.tp);
    check_expert_parallel(t_, cfg_, shape_);
    shape_.ep = t_.ep;
    stage_first_layer_ = pipeline_layer_split(cfg_.n_layer, shape_.pp, t_.pp_layers);
    // (auto: the plan takes a divisor of global-batch-size / dp)
    require(
        t_.micro_batch_size == 0 || t_.global_batch_size % (shape_.dp * t_.micro_batch_size) == 0,
        "global-batch-size " + std::to_string(t_.global_batch_size) +
            " must be divisible by dp x micro-batch-size = " + std::to_string(shape_.dp) + " x " +
            std::to_string(t_.micro_batch_size));
  });
  check_memory_fits(t_, cfg_, shape_, stage_first_layer_, world_);  // before any allocation
  if (!t_.skip_data_check)
    check_token_ids(train_ ? &*train_ : nullptr, val_ ? &*val_ : nullptr, cfg_.vocab_size, world_);
  // --trace and --tensorboard directories and the export files: checked before the out-dir is
  // written, created after it (they may lie inside it).
  all_or_none(world_, [&] {
    require_creatable_dir(t_.trace, "trace");
    require_creatable_dir(t_.tensorboard, "tensorboard");
    continues_run_ = t_.resume == "auto" ||
                     (resume_source_ && is_run_dir(resume_source_->run_dir, t_.out_dir));
    if (!root_) return;  // rank 0 writes these
    require_creatable_dir(t_.out_dir, "out-dir");
    require(!resume_source_ || t_.steps > resume_source_->manifest.step || !continues_run_,
            "out-dir " + t_.out_dir + " is the run that wrote the checkpoint: evaluating or "
            "sampling it without training would replace its run.ini, metrics.jsonl and "
            "report.json; give --out-dir a new directory");
    require_writable_file(t_.export_llmc, "export-llmc");
    if (!t_.export_llmc.empty()) require_llmc_expressible(t_.export_llmc, cfg_);
    require_writable_file(t_.export_params, "export-params");
    require_new_dir(t_.export_hf, "export-hf");
    if (!t_.export_hf.empty()) require_hf_expressible(t_.export_hf, cfg_);
    parse_shard_size(t_.export_hf_shard_size, "export-hf-shard-size");
  });
}

void Trainer::lock_out_dir() {
  // Rank 0 takes it; every rank learns the outcome here, before any rank writes.
  all_or_none(world_, [&] {
    if (!root_) return;
    std::string holder = "host " + mpi_host_name() + " pid " + std::to_string(::getpid());
    for (const char* job : {"SLURM_JOB_ID", "PBS_JOBID"})
      if (const char* id = std::getenv(job)) holder += " job " + std::string(id);
    try {
      out_dir_lock_.emplace(t_.out_dir, holder, t_.lock_wait, signals_);
    } catch (const StopRequested&) {
      return;  // a stop while waiting: agreed on below, like any start-up stop
    }
    check_out_dir(options_, continues_run_);  // under the lock: no other run can fill it
  });
  stop_if_requested(signals_, world_, "waiting for the out-dir lock");
}

void Trainer::build_model() {
  grid_.emplace(world_, shape_, t_.zero >= 2 ? t_.zero_shard_size : 0);
  full_layout_.emplace(cfg_);
  comms_ = std::make_unique<CommGroups>(world_, *grid_);  // host communicators now, device below
  devices_ = setup_devices(t_, *grid_, world_);           // GPU choice and table, --comm, power
  // Threads: --threads, OMP_NUM_THREADS, else the CPUs this rank may use (its affinity, shared
  // CPUs split among the ranks allowed on them); one line per host whose threads oversubscribe.
  node_.emplace(world_.split_shared());
  const NodeCpus node_cpus = gather_node_cpus(*node_);
  threads_ = resolve_threads(t_.threads, std::getenv("OMP_NUM_THREADS"), fair_cpu_share(node_cpus));
  for (const std::string& warning : affinity_warnings(world_, *node_, node_cpus, threads_))
    if (root_) std::fprintf(stderr, "%s\n", warning.c_str());
  allowed_cpus_ = format_cpu_list(node_cpus.cpus[node_cpus.me]);
  cpu_share_ = cpu_share(node_cpus);
  model_options_ = {parse_precision(t_.precision),
                    parse_recompute(t_.recompute),
                    Precision::Fp32,
                    t_.zero >= 2,
                    t_.zero == 3,
                    t_.sequence_parallel,
                    static_cast<float>(t_.moe_aux_loss_coef),
                    static_cast<float>(t_.moe_z_loss_coef),
                    cfg_.n_experts > 0 ? parse_moe_aux_loss(t_.moe_aux_loss_form)  // resolved
                                       : MoeAuxLoss::PerLayer,
                    t_.document_positions};
  all_or_none(world_, [&] {
    require((faults_.kind() != FaultKind::Nan && faults_.kind() != FaultKind::Drift) ||
                t_.device == "cpu",
            "MPITRAIN_FAULT nan / drift write host memory: --device cpu only");
    backend_ = make_backend(t_, threads_, model_options_.precision, devices_);
    if (t_.profile_ops) {
      op_profile_ = std::make_unique<OpProfile>();
      backend_ = std::make_unique<ProfilingBackend>(std::move(backend_), *op_profile_);
    }
    model_options_.storage = compute_storage(model_options_.precision, *backend_);
#ifdef MPITRAIN_HAVE_CUDA
    if (auto* gpu = dynamic_cast<CudaBackend<float>*>(backend_.get()); gpu && root_)
      std::printf("device: %s\n", gpu->describe().c_str());
#endif
    if (!backend_->host_memory() && t_.peak_gflops == 0)
      device_peak_ = measure_matmul_gflops(*backend_, 4096, 5);
  });
  // The micro-batch (--micro-batch-size auto: planned against the memory left now).
  micro_batch_ = resolve_micro_batch(t_, cfg_, shape_, *node_, world_);
  micro_batches_ = t_.global_batch_size / (shape_.dp * micro_batch_);
  const int slots = pipeline_slots(schedule_, micro_batches_, shape_.pp, grid_->pp_rank());
  const ModelShard shard =
      shard_of(shape_, stage_first_layer_, grid_->tp_rank(), grid_->pp_rank(), grid_->ep_rank());
#ifdef MPITRAIN_HAVE_CUDA
  if (auto* gpu = dynamic_cast<CudaBackend<float>*>(backend_.get()))  // tensors cross ranks
    all_or_none(world_, [&] {
      comms_->use_device(
          devices_.comm, gpu->stream(),
          data_call_sizes(cfg_, shard, micro_batch_, local_seq_len(), slots, t_.bucket_mb,
                          {t_.zero, model_options_.storage, t_.zero3_prefetch,
                           t_.zero3_reshard_after_forward}),
          std::max(t_.comm_timeout, t_.comm_timeout_startup));
    });
#endif
  // A call blocked longer than --comm-timeout(-startup), or NCCL work incomplete that long, is
  // reported and ends the job (exit 3); so does an NCCL error.
  watchdog_ =
      std::make_unique<Watchdog>(world_, WatchdogConfig{t_.comm_timeout_startup, t_.comm_timeout},
                                 comms_->host_logs(), comms_->device_work());
  blocking_ = comms_->blocking();
  store_ = std::make_unique<CheckpointStore>(checkpoints_dir(), world_, t_.keep_last, faults_);
  // A resume that loads a checkpoint or stops (an explicit one; auto over checkpoints without
  // --overwrite, which refuses to start fresh over damaged ones) takes every parameter from the
  // checkpoint: their initial values are neither drawn nor read (--init-from).
  params_from_checkpoint_ =
      !t_.resume.empty() &&
      (t_.resume != "auto" || store_->load_latest_loads_or_stops(t_.overwrite));
  all_or_none(world_, [&] {
    model_ = std::make_unique<Model<float>>(cfg_, *backend_, shard, micro_batch_, local_seq_len(),
                                            slots, &comms_->tp_data(), model_options_);
    if (comms_->ep)  // E/ep experts, rows sent
      model_->set_expert_parallel(&*comms_->ep, comms_->ep_data());
    if (shape_.cp > 1) {  // this rank's two chunks of each sequence: their positions, the ring
      chunks_.emplace(t_.seq_len, shape_.cp, grid_->cp_rank());
      model_->set_context_parallel(&comms_->cp_data(), *chunks_);
    }
    model_->set_routing_groups(&comms_->tp, &comms_->cp);  // MoE statistics: host vectors
    if (t_.zero >= 2) {  // ZeRO-2/3: the units' shards, lent to the model as it computes them
      sharded_ = std::make_unique<ShardedUnits>(
          *backend_, model_->layout(), comms_->dp_shard_data(), comms_->dp_replica_data(),
          model_options_.storage,
          ShardingOptions{t_.zero, t_.zero3_reshard_after_forward, t_.zero3_prefetch,
                          comms_->expert_dp_data(), expert_ranges(model_->layout())},
          model_->params());
      model_->set_lender(sharded_.get());
    }
    const bool zero3 = t_.zero == 3;
    if (params_from_checkpoint_) {  // resume() loads every parameter
      if (root_ && !t_.init_from.empty())
        std::printf("resume: --init-from %s is not read: the checkpoint holds every parameter\n",
                    t_.init_from.c_str());
    } else if (t_.init_from.empty()) {
      if (zero3)  // one tensor at a time into the shards: never the whole stage on the host
        initial_tensors<float>(cfg_, model_->layout(), t_.seed,
                               [&](const ParamTensor& p, const float* v) { sharded_->set_tensor(p, v); });
      else
        model_->init(t_.seed);
    } else if (is_hf_dir(t_.init_from)) {  // one tensor at a time, this shard's only
      // ZeRO-3: only the part of each tensor this rank owns is read.
      const auto owned = [&](const ParamTensor& p) {
        const ShardRanges::Overlap o = sharded_->owned().overlap(p.offset, p.offset + p.numel);
        return o.size() == 0 ? std::pair<size_t, size_t>{0, 0}
                             : std::pair<size_t, size_t>{o.begin - p.offset, o.end - p.offset};
      };
      load_hf_model(
          t_.init_from, cfg_, model_->layout(),
          [&](const ParamTensor& p, const float* v) {
            if (zero3) sharded_->set_tensor(p, v);
            else backend_->upload(model_->params() + p.offset, v, p.numel);
          },
          zero3 ? std::function<std::pair<size_t, size_t>(const ParamTensor&)>(owned) : nullptr);
    } else {
      std::vector<float> full(full_layout_->total()), local(model_->num_params());
      load_llmc_model(t_.init_from, cfg_, *full_layout_, full.data());
      for (const ParamTensor& p : model_->layout().tensors()) {
        take_shard(p, full.data() + full_layout_->tensors()[p.global_index].offset,
                   local.data() + p.offset);
        if (zero3) sharded_->set_tensor(p, local.data() + p.offset);
      }
      if (!zero3) backend_->upload(model_->params(), local.data(), local.size());
    }
    require(faults_.kind() != FaultKind::Nan || faults_.layer() < cfg_.n_layer,
            "MPITRAIN_FAULT: layer " + std::to_string(faults_.layer()) + " is not below n-layer " +
                std::to_string(cfg_.n_layer));
  });
}

std::string Trainer::run_ini() const {
  const auto text = [](auto v) { return std::to_string(v); };
  const auto flag = [](bool v) { return std::string(v ? "true" : "false"); };
  std::vector<std::pair<std::string, std::string>> resolved = kept_setting_values(t_);
  resolved.insert(resolved.end(),
                  {{"dp", text(shape_.dp)},
                   {"arch", to_string(cfg_.arch)},
                   {"n-layer", text(cfg_.n_layer)},
                   {"n-head", text(cfg_.n_head)},
                   {"d-model", text(cfg_.d_model)},
                   {"seq-len", text(t_.seq_len)},
                   {"seed", text(t_.seed)},
                   {"shuffle", flag(t_.shuffle)},
                   {"optimizer", t_.optimizer},
                   {"global-batch-size", text(t_.global_batch_size)},
                   {"tp", text(shape_.tp)},
                   {"pp", text(shape_.pp)},
                   {"cp", text(shape_.cp)},
                   {"threads", text(threads_)},
                   {"micro-batch-size", text(micro_batch_)},
                   {"n-kv-head", text(cfg_.n_kv_head)},
                   {"d-ff", text(cfg_.d_ff)},
                   {"vocab-size", text(cfg_.vocab_size)},
                   {"max-seq-len", text(cfg_.max_seq_len)},
                   {"norm-eps", shortest_text(cfg_.norm_eps)},
                   {"rope-theta", shortest_text(cfg_.rope_theta)},
                   {"tie-embeddings", flag(cfg_.tie_embeddings)},
                   {"attention-bias", flag(cfg_.proj_bias)},
                   {"qkv-bias", flag(cfg_.qkv_bias)},
                   {"mlp-bias", flag(cfg_.mlp_bias)},
                   {"head-dim", text(cfg_.head_dim)},
                   {"sliding-window", text(cfg_.sliding_window)},
                   {"qk-norm", flag(cfg_.qk_norm)},
                   {"rope-scaling", to_string(cfg_.rope_scaling)},
                   {"gpt2-scale-attn-weights", flag(cfg_.scale_attn_weights)},
                   {"gpt2-scale-attn-by-layer", flag(cfg_.scale_attn_by_inverse_layer_idx)},
                   {"n-experts", text(cfg_.n_experts)},
                   {"top-k", text(cfg_.top_k)},
                   {"moe-ff", text(cfg_.moe_ff)},
                   {"n-shared-experts", text(cfg_.n_shared_experts)},
                   {"moe-shared-expert-gate", flag(cfg_.moe_shared_gate)},
                   {"moe-every", text(cfg_.moe_every)},
                   {"moe-first-dense", text(cfg_.moe_first_dense)},
                   {"moe-norm-topk", flag(cfg_.moe_norm_topk)},
                   {"moe-router-score", cfg_.moe_router_score()},
                   {"moe-expert-bias", flag(cfg_.moe_expert_bias)},
                   {"moe-route-scale", shortest_text(cfg_.moe_route_scale)},
                   {"moe-router-groups", text(cfg_.moe_groups)},
                   {"moe-router-group-topk", text(cfg_.moe_group_topk)},
                   {"moe-aux-loss-coef", shortest_text(t_.moe_aux_loss_coef)},
                   {"moe-z-loss-coef", shortest_text(t_.moe_z_loss_coef)}});
  return resolved_ini(options_.effective, resolved);
}

void Trainer::build_step_parts() {
  optimizer_config_ = {parse_optimizer(t_.optimizer),   static_cast<float>(t_.beta1),
                       static_cast<float>(t_.beta2),    static_cast<float>(t_.adam_eps),
                       static_cast<float>(t_.momentum), static_cast<float>(t_.weight_decay)};
  const int schedule_steps = t_.lr_decay_steps > 0 ? t_.lr_decay_steps : t_.steps;
  lr_schedule_ = LrSchedule{parse_lr_decay(t_.lr_schedule), t_.lr, t_.lr * t_.min_lr_ratio,
                            t_.warmup_steps, schedule_steps, t_.lr_wsd_decay_steps,
                            parse_wsd_decay(t_.lr_wsd_decay_style)};
  if (train_) {
    stream_.emplace(*train_, t_.seed, t_.shuffle);
    loader_.emplace(*stream_, t_.seq_len, t_.global_batch_size, micro_batch_, grid_->dp_rank(),
                    shape_.dp, chunks_ ? &*chunks_ : nullptr, documents_, loss_boundary_);
    std::string hdf5_file;  // a file only HDF5 reads: on the main thread, so no prefetch
    if (t_.prefetch && train_->concurrent_reads(&hdf5_file))
      prefetch_ = std::make_unique<BatchPrefetcher>(*loader_, std::clamp(micro_batches_, 2, 16));
    else if (t_.prefetch && root_)
      std::printf("prefetch off: %s is a chunked or compressed HDF5 file, read on the main thread\n",
                  hdf5_file.c_str());
  }
  runner_ = std::make_unique<PipelineRunner>(*model_, &comms_->pp_data(), schedule_, micro_batches_,
                                             micro_batch_, local_seq_len(), documents_.has_value(),
                                             &trace_, [this] { return blocked_seconds(); });
  if (sharded_) {
    sync_ = sharded_.get();
  } else {
    buckets_ = std::make_unique<GradBuckets>(
        comms_->dp_data(), model_->grads(), model_->num_params(),
        static_cast<size_t>(t_.bucket_mb * (1 << 20)),
        GradSyncOptions{t_.zero == 1, parse_grad_compress(t_.grad_compress), t_.topk_ratio,
                        comms_->expert_dp_data(), expert_ranges(model_->layout())});
    bucket_sync_ = std::make_unique<BucketSync>(*buckets_, *model_);
    sync_ = bucket_sync_.get();
  }
  // The optimizer updates this rank's owned part of the parameters (all of them without ZeRO),
  // from fp32 master weights taken before the compute copy is rounded to the run's precision.
  // Its norms are host vectors: the host communicators. LAMB's expert norms: summed over ep
  // without ZeRO; with ZeRO the dp group's shards (ep x expert-dp) hold every expert once.
  tied_copies_ = cfg_.tie_embeddings && shape_.pp > 1 && comms_->embedding;
  // The emulated path rounds its fp32 containers before the master is taken from them (the
  // owned part too: ZeRO-3's, or a compact copy of it; rounding twice changes nothing).
  if (sharded_) sharded_->take_params();
  if (float* emulated = model_->params().full())
    backend_->round_to(emulated, model_->num_params(), model_options_.precision);
  if (float* emulated = sync_->owned_params().full())
    backend_->round_to(emulated, sync_->owned().size(), model_options_.precision);
  backend_->set_alloc_kind(AllocKind::Optimizer);
  optimizer_ = std::make_unique<Optimizer>(
      *backend_, model_->layout(), optimizer_config_, sync_->owned_params(), sync_->owned(),
      model_options_.precision,
      NormGroups{t_.zero ? &comms_->dp_shard() : nullptr, &comms_->tp,
                 tied_copies_ ? &*comms_->embedding : nullptr,
                 t_.zero == 0 && comms_->ep ? &*comms_->ep : nullptr});
  backend_->set_alloc_kind(AllocKind::Activations);
#ifdef MPITRAIN_HAVE_CUDA
  if (auto* gpu = dynamic_cast<CudaBackend<float>*>(backend_.get())) {  // the footprint is fixed
    gpu->seal_memory();
    if (root_) std::printf("%s\n", gpu->memory_report().c_str());
  }
#endif
  scaler_ = std::make_unique<LossScaler>(
      LossScalerConfig{model_options_.precision == Precision::Fp16, t_.initial_loss_scale,
                       t_.loss_scale_window, t_.min_loss_scale});
  guard_ = std::make_unique<NumericGuard>(parse_nan_policy(t_.on_nan), t_.out_dir, comms_->world);
  // The ranks whose owned parts add up to the stage once: the shard group's (every dp rank under
  // ZeRO-1, the first replica's under hybrid sharding), else data-parallel (dp-cp) rank 0.
  // Under expert parallelism without ZeRO the ep-split experts count once on expert-dp rank 0;
  // with ZeRO each expert element is owned by one expert-dp rank, as the dense ones by one rank.
  const bool counts_once = t_.zero == 1 || (t_.zero >= 2 ? grid_->dp_replica().rank() == 0
                                                         : grid_->dp_cp_rank() == 0);
  const bool experts_count_once =
      shape_.ep > 1 && t_.zero == 0 ? grid_->expert_dp().rank() == 0 : counts_once;
  update_ = std::make_unique<UpdateStep>(
      *model_, *sync_, *optimizer_, *scaler_, *guard_,
      UpdateGroups{&comms_->world, tied_copies_ ? comms_->embedding_data() : nullptr, counts_once,
                   experts_count_once},
      t_.grad_clip, faults_, &trace_);

  // The parameters this rank loads: the whole stage, or under ZeRO-3 its pieces.
  held_params_ = t_.zero == 3 ? sync_->owned_params() : model_->params();
  state_.emplace(checkpoint_state(
      cfg_, model_->layout(), held_params_.full(),
      t_.zero == 3 ? sync_->owned() : ShardRanges::whole(model_->num_params()), *optimizer_,
      counts_once, experts_count_once));
  mirrored_ = checkpoints_mirrored(*backend_);
  best_val_ = std::numeric_limits<double>::quiet_NaN();
  // MFU: PaLM's 6N + 12 L d T flops per token against the summed peak of all ranks.
  // On the CPU the sgemm rate per CPU x the CPUs of each host (each counted once), the highest
  // measured without contention on this host kept (monitor/peak_cache.hpp), so that MFU
  // compares between runs.
  double peak_cpus = 0.0, suspect_ranks = 0.0;
  if (backend_->host_memory()) {
    const NodeCpus node_cpus = gather_node_cpus(*node_);
    const int cpus = static_cast<int>(node_cpus.cpus[node_cpus.me].size());
    // bf16 / fp16 runs on a CPU with bf16 instructions: the bf16 products' peak (about 2x sgemm
    // with AVX512-BF16, more with AMX), the hardware's 16-bit rate.
    const bool bf16_peak = model_options_.precision != Precision::Fp32 && cpu_bf16_gemms();
    peak_of_ = bf16_peak ? "the best bf16 gemm" : "the best sgemm";
    const Peak p = resolve_cpu_peak(
        t_.peak_gflops, *node_, node_cpus, threads_,
        [&] {
          return bf16_peak ? measure_cpu_bf16_peak(threads_, cpus)
                           : measure_cpu_peak(threads_, cpus);
        },
        bf16_peak ? kBf16Peak : kFp32Peak);
    peak_ = p.gflops;
    peak_cpus = p.cpus;
    peak_rate_ = p.rate;
    suspect_ranks = p.suspect.empty() ? 0.0 : 1.0;
    peak_source_ = (t_.peak_gflops > 0 ? "" : peak_of_ + ", ") + p.source +
                   (p.suspect.empty() ? "" : "; SUSPECT: " + p.suspect);
    // --profile-ops: the floors' rates, this rank's (every rank measures at once, as they run).
    if (op_profile_) {
      op_gemm_gflops_ = p.rate;
      op_bandwidth_gbs_ = measure_copy_gbs(size_t{128} << 20, 3);
    }
    if (root_ && !p.note.empty()) std::fprintf(stderr, "%s\n", p.note.c_str());
  } else {
    peak_ = t_.peak_gflops > 0 ? t_.peak_gflops : device_peak_;
    peak_source_ = t_.peak_gflops > 0 ? "given by --peak-gflops" : "measured now on the device";
  }
  double peak_sums[3] = {peak_, peak_cpus, suspect_ranks};
  comms_->world.all_reduce(peak_sums, 3, ReduceOp::Sum);
  peak_ = peak_sums[0];
  peak_cpus_ = peak_sums[1];
  peak_suspect_ranks_ = static_cast<int>(std::lround(peak_sums[2]));
  resume();
  lr_schedule_->check();  // its length is final: the run's, or the resumed checkpoint's
  // Saves at planned steps, or only at a stop's signal; background ones where they are periodic.
  const bool periodic = t_.save_interval > 0 || (t_.save_best && val_);
  const SavePlan saves =
      plan_saves({periodic || t_.exit_at_step > 0 || t_.exit_after_minutes > 0,
                  t_.async_save != "false" && periodic, mirrored_, t_.async_save == "auto",
                  !backend_->host_memory() || threads_ < cpu_share_},
                 *state_, *node_, world_);

  // Every check has passed (the last: the checkpoint's): from here on the out-dir is written.
  stop_if_requested(signals_, world_, "loading the checkpoint and measuring the peak");
  std::unique_ptr<TensorBoardWriter> tensorboard;
  all_or_none(world_, [&] {
    if (root_) write_out_dir(options_, run_ini(), continues_run_);
    if (root_ && !tokenizer_descriptor_.empty())
      keep_tokenizer(tokenizer_descriptor_, (fs::path(t_.out_dir) / kRunTokenizerDir).string());
    if (!t_.trace.empty())
      trace_.open(t_.trace, world_.rank(),
                  "rank " + std::to_string(world_.rank()) + " (dp " +
                      std::to_string(grid_->dp_rank()) + " tp " + std::to_string(grid_->tp_rank()) +
                      " pp " + std::to_string(grid_->pp_rank()) + " cp " +
                      std::to_string(grid_->cp_rank()) + ")");
    if (root_ && !t_.tensorboard.empty())
      tensorboard = std::make_unique<TensorBoardWriter>(t_.tensorboard, start_step_ + 1);
  });
  log_ = std::make_unique<MetricsLog>((fs::path(t_.out_dir) / "metrics.jsonl").string(), root_,
                                      continues_run_ ? start_step_ : -1, std::move(tensorboard),
                                      t_.log_interval, start_);
  if (t_.peak_gflops <= 0 && !peak_of_.empty()) log_->mfu_of(peak_of_);
  report_path_ = (fs::path(t_.out_dir) / "report.json").string();
  checkpointer_ = std::make_unique<Checkpointer>(saves, *store_, *state_, *backend_,
                                                 *log_, trace_);

  flops_per_token_ = model_flops_per_token(cfg_, t_.seq_len);
  tokens_per_step_ = static_cast<double>(t_.global_batch_size) * t_.seq_len;
  // What each rank holds (the largest of all ranks): the compute copy of the parameters (in its
  // storage type) and the fp32 gradients (ZeRO-2/3: their shards and unit buffers), optimizer
  // state (with the fp32 master under bf16/fp16; 1/dp of it with ZeRO), activations.
  held_bytes_[0] = static_cast<double>(model_->param_bytes() + model_->grad_bytes() +
                                       (sharded_ ? sharded_->bytes() : bucket_sync_->bytes()));
  held_bytes_[1] = static_cast<double>(optimizer_->bytes());
  held_bytes_[2] = static_cast<double>(model_->activation_bytes());
  comms_->world.all_reduce(held_bytes_, 3, ReduceOp::Max);
  load_ = [this](int micro, int32_t* tok, int32_t* tgt, int32_t* starts) {
    if (prefetch_)
      prefetch_->load(consumed_, micro, tok, tgt, starts);
    else
      loader_->load(consumed_, micro, tok, tgt, starts);
  };
  grads_ready_ = [this](size_t offset) { update_->grads_ready(offset); };
  tokens_.resize(static_cast<size_t>(micro_batch_) * t_.seq_len);
  targets_.resize(tokens_.size());
  if (documents_) doc_starts_.resize(tokens_.size());
  if (chunks_) {
    local_tokens_.resize(static_cast<size_t>(micro_batch_) * local_seq_len());
    local_targets_.resize(local_tokens_.size());
    if (documents_) local_doc_starts_.resize(local_tokens_.size());
  }
}

std::string Trainer::zero_text() const {
  if (t_.zero == 0) return "";
  std::string text = ", ZeRO-" + std::to_string(t_.zero);
  if (t_.zero >= 2 && grid_->shard_size() < shape_.dp * shape_.cp)
    text += " hybrid: " + std::to_string(grid_->shard_size()) + " x " +
            std::to_string(shape_.dp * shape_.cp / grid_->shard_size()) + " replicas";
  if (t_.zero == 3 && !t_.zero3_reshard_after_forward) text += ", kept gathered";
  return text;
}

void Trainer::print_banner() const {
  if (!root_) return;
  // An MoE model: its experts, and the parameters a token uses of the total.
  const std::string experts = experts_text(cfg_);
  const std::string params =
      count_text(static_cast<double>(full_layout_->total())) + " parameters" +
      (experts.empty() ? "" : " (" + count_text(active_params(cfg_)) + " active per token)");
  const std::string window =
      cfg_.sliding_window > 0 ? " (window " + std::to_string(cfg_.sliding_window) + ")" : "";
  std::printf(
      "mpitrain %s | %s L%d H%d KV%d C%d F%d V%d T%d%s%s | %s | %zu tokens of "
      "training data in %zu %s\n",
      MPITRAIN_VERSION, to_string(cfg_.arch).c_str(), cfg_.n_layer, cfg_.n_head, cfg_.n_kv_head,
      cfg_.d_model, cfg_.d_ff, cfg_.vocab_size, t_.seq_len, window.c_str(),
      experts.empty() ? "" : (" | " + experts).c_str(), params.c_str(),
      static_cast<size_t>(train_ ? train_->tokens() : 0), train_ ? train_->files().size() : 0,
      train_ && train_->files().size() == 1 ? "file" : "files");
  const auto count = [](int n, const char* one, const char* many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  // CPU: the CPUs counted (each host's once) and rank 0's rate, which they are counted at.
  char counted[96] = "";
  if (peak_cpus_ > 0)
    std::snprintf(counted, sizeof counted, " on %ld CPUs (rank 0: %.1f GFLOP/s with %s,",
                  std::lround(peak_cpus_), peak_rate_,
                  count(threads_, "thread", "threads").c_str());
  std::printf(
      "%s = dp %d x tp %d x pp %d x cp %d, %s each (rank 0 on CPUs %s) | global batch %d = dp %d "
      "x %s x %d | peak %.1f GFLOP/s in all%s %s)\n",
      count(world_.size(), "rank", "ranks").c_str(), shape_.dp, shape_.tp, shape_.pp, shape_.cp,
      count(threads_, "thread", "threads").c_str(), allowed_cpus_.c_str(), t_.global_batch_size,
      shape_.dp, count(micro_batches_, "micro-batch", "micro-batches").c_str(), micro_batch_, peak_,
      peak_cpus_ > 0 ? counted : " (rank 0:", peak_source_.c_str());
  if (backend_->host_memory())
    std::printf("fp32 products on rank 0: %s\n", cpu_sgemm_in_use().c_str());
  if (documents_)
    std::printf("document mask: %s; a token attends within its document only, %s\n",
                describe(*documents_, *tokenizer_).c_str(),
                t_.document_positions ? "its position counted from the document's first token"
                                      : "its position counted in the window");
  if (loss_boundary_)
    std::printf(
        "loss mask: no loss where the input is token %d (%s), whose next token is a "
        "document's first; the loss is the mean over the scored tokens\n",
        *loss_boundary_, tokenizer_->decode(&*loss_boundary_, 1).c_str());
  for (const auto& [data, name] : {std::pair{&train_, "training"}, std::pair{&val_, "validation"}})
    if (*data && (*data)->loss_masked_files() > 0)
      std::printf(
          "loss mask: %zu of the %zu %s files score only the targets their /loss_mask "
          "marks 1; the loss is the mean over the scored tokens\n",
          (*data)->loss_masked_files(), (*data)->files().size(), name);
  if (peak_suspect_ranks_ > 0)
    std::printf("warning: the peak of %s is suspect (measured under contention): MFU may read "
                "too high; a start on an idle host caches the machine's, or give --peak-gflops\n",
                count(peak_suspect_ranks_, "rank", "ranks").c_str());
  std::printf(
      "per rank (at most): parameters and gradients %.2f MiB | optimizer state %.2f MiB "
      "(%s%s) | activations %.2f MiB (%s%s, recompute %s%s)",
      held_bytes_[0] / (1 << 20), held_bytes_[1] / (1 << 20),
      to_string(optimizer_config_.kind).c_str(), zero_text().c_str(),
      held_bytes_[2] / (1 << 20), t_.precision.c_str(),
      model_options_.storage != model_options_.precision ? " in fp32 containers" : "",
      t_.recompute.c_str(), t_.sequence_parallel ? ", sp" : "");
  if (shape_.pp > 1)
    std::printf(" | pipeline %s, %d stages, bubble (pp-1)/(m+pp-1) = %.1f%%",
                to_string(schedule_).c_str(), shape_.pp,
                100.0 * pipeline_bubble(micro_batches_, shape_.pp));
  if (shape_.dp > 1 && buckets_) std::printf(" | %zu gradient buckets", buckets_->buckets());
  if (shape_.ep > 1)
    std::printf(" | expert parallel: ep %d x expert-dp %d, %d of %d experts per rank", shape_.ep,
                shape_.dp / shape_.ep, cfg_.n_experts / shape_.ep, cfg_.n_experts);
  if (sharded_)
    std::printf(" | %zu units sharded over %d ranks%s", model_->layout().units().size(),
                grid_->shard_size(),
                t_.zero == 3 ? (t_.zero3_prefetch ? ", prefetch on" : ", prefetch off") : "");
  std::printf("\n");
  if (cfg_.n_experts > 0 && !backend_->host_memory())
    std::printf("note: mixture of experts on %s: the experts' GEMMs run on the device, the "
                "routing (router, top-k, sort, combine) on the host over staged copies of each "
                "MoE layer's rows (not yet fast)\n",
                t_.device.c_str());
  std::fflush(stdout);
}

}  // namespace mpitrain
