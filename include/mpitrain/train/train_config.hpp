// Everything about a run that is not the model's shape. Filled from options (app/options.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace mpitrain {

struct TrainConfig {
  std::string out_dir = "runs/default";
  bool overwrite = false;
  double lock_wait = 10.0;    // s to wait for another run's lock on the out-dir, then exit 2
  std::string trace;          // a Chrome-trace timeline per rank into this directory; "" = off
  std::string tensorboard;    // TensorBoard scalar events (rank 0) into this directory; "" = off
  int steps = 100;
  int global_batch_size = 8;  // sequences per optimizer step, over all ranks
  int micro_batch_size = 4;   // sequences per forward/backward on one rank; 0 = auto:
                              // the largest the memory plan fits (planner/micro_batch_auto.hpp)
  double device_memory_gib = 0;  // what a rank may fill (fit check, auto); 0 = free memory
  int seq_len = 64;

  double lr = 1e-3;
  std::string lr_schedule = "cosine";
  int lr_wsd_decay_steps = 0;                 // lr-schedule wsd: the decay's last steps
  std::string lr_wsd_decay_style = "linear";  // and its shape
  int warmup_steps = 10;
  int lr_decay_steps = 0;     // the schedule's length; 0 = steps (a resume: the checkpoint's)
  double min_lr_ratio = 0.1;  // cosine/linear decay ends at lr * min_lr_ratio
  std::string optimizer = "adamw";  // adamw | sgd | lamb (optim/optimizer.hpp)
  double momentum = 0.9;      // sgd
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  double grad_clip = 1.0;     // global grad-norm clip, 0 = off
  double moe_aux_loss_coef = 0.001;  // MoE load-balancing loss weight (Mixtral's default)
  double moe_z_loss_coef = 0.0;      // MoE router z-loss weight (ST-MoE)
  double moe_expert_bias_rate = 0.001;  // --moe-expert-bias's step (Megatron-Core's default)
  // The aux loss's form (model/moe.hpp): per-layer | all-layers; auto: all-layers for an
  // --init-from Hugging Face model (transformers' form), per-layer otherwise (as Megatron-Core)
  std::string moe_aux_loss_form = "auto";

  int dp = 0, tp = 0, pp = 0;   // process grid; 0 = derived from the world size
  int cp = 1;                   // context parallelism (ranks per sequence)
  int ep = 1;                   // expert parallelism (ranks splitting the routed experts, of dp)
  std::string pp_layers;        // blocks per stage "3,2,..."; "" = balanced
  std::string pp_schedule = "1f1b";
  double bucket_mb = 25.0;      // data-parallel gradient bucket size
  int zero = 0;  // 1: optimizer state sharded over dp (grad_sync.hpp); 2: and gradients; 3: and
                 // parameters (train/sharded_units.hpp)
  bool zero3_reshard_after_forward = true;  // gather again for the backward
  bool zero3_prefetch = true;               // the next unit's gather during this unit's compute
  bool sequence_parallel = false;  // tp > 1: norm/residual regions on seq rows / tp (model.hpp)
  int zero_shard_size = 0;                  // HSDP: shard groups of this many dp ranks; 0 = dp
  std::string grad_compress = "none";  // none | bf16 | fp16 | int8 | topk (compression.hpp)
  double topk_ratio = 0.01;     // topk: fraction of each bucket sent

  uint64_t seed = 1337;
  bool shuffle = true;
  bool document_mask = false;  // attention within each document only (data/document_starts.hpp)
  bool document_positions = false;  // positions from each document's start (needs document_mask)
  bool mask_boundary_loss = false;  // no loss after the document boundary (data/loss_mask.hpp)
  std::string train_data;     // a data spec: [WEIGHT:]PATH_OR_GLOB,... (data/data_spec.hpp)
  std::string val_data;
  std::string data_format = "auto";
  bool skip_data_check = false;  // no start-up scan of every token id against the vocabulary
  bool prefetch = true;          // read the next micro-batches in a background thread
  std::string init_from;      // llm.c GPT-2 file or HF directory, "" = random initialisation
  std::string export_llmc;    // write the trained gpt2 model in llm.c's format here, "" = no
  std::string export_params;  // write the trained parameters (full shapes) to this HDF5 file
  std::string export_hf;      // write a Hugging Face checkpoint directory here, "" = no
  std::string export_hf_shard_size = "5GB";  // its files' size (hf_model.hpp: parse_shard_size)

  std::string precision = "fp32";   // fp32 | bf16 | fp16 (backend/precision.hpp)
  std::string recompute = "none";   // none | selective | full (model/model.hpp)
  double initial_loss_scale = 65536.0;  // fp16 dynamic loss scaling (optim/loss_scaler.hpp)
  int loss_scale_window = 2000;
  double min_loss_scale = 1.0;

  int save_interval = 0;      // steps between checkpoints (and one at the end); 0 = none
  int keep_last = 3;          // committed step checkpoints kept; 0 = all
  // Saves written by a thread while training goes on: true, false, or auto (where a background
  // writer has a CPU to itself; else once a synchronous save is slow: train/checkpointer.hpp)
  std::string async_save = "auto";
  std::string resume;         // "" = start fresh, "auto" = latest valid if any, else a directory
  bool allow_seed_change = false;  // resume under another seed (a new data order from here on)
  bool allow_data_change = false;  // resume on other training data than the checkpoint records
  bool save_best = false;     // keep the checkpoint with the lowest validation loss as best/
  double exit_after_minutes = 0.0;  // save and exit 85 before this much wall time; 0 = off
  int exit_at_step = 0;       // save and exit 85 after this step; 0 = off

  double comm_timeout = 100.0;          // s a communication call may block (runtime/watchdog.hpp)
  double comm_timeout_startup = 300.0;  // ... until the first step has finished; 0 = no limit
  std::string on_nan = "stop";          // skip | stop (train/numeric_guard.hpp)
  int check_replicas = 100;             // steps between replica checksums over dp; 0 = off

  int eval_interval = 50;     // steps; 0 = only at the end
  int log_interval = 10;      // steps per console line (metrics.jsonl has every step)
  int eval_samples = 64;      // validation sequences per evaluation
  int threads = 0;            // per rank; 0 = OMP_NUM_THREADS, else cores per node / ranks per node
  bool huge_pages = true;     // cpu: the tensors on huge pages (CpuPages)
  std::string device = "cpu";       // cpu | cuda (a GPU per rank, or shared; runtime/device.hpp)
  std::string comm = "auto";        // auto | nccl | mpi: what moves device tensors (comm_groups.hpp)
  std::string kernels = "cudnn";    // cuda: cudnn | cuda (KernelSet)
  bool tf32 = false;                // cuda, precision fp32: allow TF32 tensor-core GEMMs
  double gpu_workspace_mb = 1024;   // cuda: the backend's workspace arena
  double peak_gflops = 0.0;   // per rank, for MFU; 0 = measure this rank's sgemm rate at start-up
  bool profile_ops = false;   // CPU: time every backend op (monitor/op_profile.hpp)
  int sample_tokens = 128;    // text generated at the end; 0 = none
  std::string sample_prompt;  // "" = start from a newline
  double sample_temperature = 0.8;
  int sample_top_k = 0;       // sample among the k most likely tokens; 0 = all
  double sample_top_p = 1.0;  // then the nucleus of this probability; 1 = all
  std::string tokenizer;      // the sample's tokenizer over the data's (data/tokenizer.hpp)
};

}  // namespace mpitrain
