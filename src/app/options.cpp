#include "mpitrain/app/options.hpp"

#include <boost/program_options.hpp>
#include <charconv>
#include <fstream>
#include <sstream>

#include "mpitrain/app/build_info.hpp"
#include "mpitrain/app/command_line.hpp"
#include "mpitrain/app/help_format.hpp"
#include "mpitrain/app/option_ranges.hpp"
#include "mpitrain/backend/precision.hpp"
#include "mpitrain/io/text_file.hpp"
#include "mpitrain/model/model.hpp"
#include "mpitrain/optim/optimizer.hpp"
#include "mpitrain/parallel/compression.hpp"
#include "mpitrain/runtime/error.hpp"
#include "mpitrain/train/numeric_guard.hpp"

namespace po = boost::program_options;

namespace mpitrain {

namespace {

// Model sizes: up to 2^28, so that the shape's int arithmetic (4 d-model, 3 d-model, the padded
// vocabulary) cannot overflow; anything near it is refused by the memory check anyway.
constexpr double kMaxSize = 1 << 28;

// The valid range of every numeric option (seed: any 64-bit value), in --help and checked at
// start-up for flags and config-file values alike; a value must be finite.
const std::vector<OptionRange> kRanges = {
    // Model
    {"n-layer", 1, kMaxSize},
    {"n-head", 1, kMaxSize},
    {"n-kv-head", 0, kMaxSize},
    {"d-model", 1, kMaxSize},
    {"d-ff", 0, kMaxSize},
    {"vocab-size", 0, kMaxSize},
    {"max-seq-len", 0, kMaxSize},
    {"norm-eps", 0, 1, true},
    {"rope-theta", 0, kUnbounded, true},
    {"head-dim", 0, kMaxSize},
    {"sliding-window", 0, kMaxSize},
    {"n-experts", 0, kMaxSize},
    {"top-k", 1, kMaxSize},
    {"moe-ff", 0, kMaxSize},
    {"n-shared-experts", 0, kMaxSize},
    {"moe-every", 1, kMaxSize},
    {"moe-first-dense", 0, kMaxSize},
    {"moe-router-groups", 1, kMaxSize},
    {"moe-router-group-topk", 0, kMaxSize},
    // Data and evaluation
    {"eval-interval", 0, kUnbounded},
    {"eval-samples", 1, kUnbounded},
    {"sample-tokens", 0, kUnbounded},
    {"sample-temperature", 0, kUnbounded},
    {"sample-top-k", 0, kUnbounded},
    {"sample-top-p", 0, 1, true},
    // Training
    {"steps", 0, kUnbounded},
    {"global-batch-size", 1, 1 << 24},
    {"seq-len", 1, kMaxSize},
    {"lr", 0, 10, true},
    {"warmup-steps", 0, kUnbounded},
    {"lr-decay-steps", 0, kUnbounded},
    {"lr-wsd-decay-steps", 0, kUnbounded},
    {"min-lr-ratio", 0, 1},
    {"momentum", 0, 1, false, true},
    {"weight-decay", 0, 10},
    {"beta1", 0, 1, false, true},
    {"beta2", 0, 1, false, true},
    {"adam-eps", 0, 1, true},
    {"grad-clip", 0, kUnbounded},
    // the routing losses' weights are fp32 in the model: 1e39 would be inf (used ones: <= 0.1)
    {"moe-aux-loss-coef", 0, 1e6},
    {"moe-z-loss-coef", 0, 1e6},
    {"moe-expert-bias-rate", 0, 1},
    {"moe-route-scale", 0, 1e6, true},
    // Parallelism; a bucket of 1/16 MiB (16384 floats) keeps the count of buckets, each an
    // all-reduce in flight, sane; 1 TiB exceeds any model's gradients (one bucket).
    {"dp", 0, kUnbounded},
    {"tp", 0, kUnbounded},
    {"pp", 0, kUnbounded},
    {"cp", 1, kUnbounded},
    {"ep", 1, kUnbounded},
    {"bucket-mb", 0.0625, 1 << 20},
    {"zero", 0, 3},
    {"zero-shard-size", 0, 1 << 20},
    {"topk-ratio", 0, 1, true},
    // Precision and memory; fp16 loss scales are powers of two well inside 2^64
    {"device-memory-gib", 0, kUnbounded},
    {"initial-loss-scale", 1, 1e18},
    {"loss-scale-window", 1, kUnbounded},
    {"min-loss-scale", 0, 1e18, true},
    // Checkpoints and exports
    {"save-interval", 0, kUnbounded},
    {"keep-last", 0, kUnbounded},
    {"exit-after-minutes", 0, kUnbounded},
    {"exit-at-step", 0, kUnbounded},
    {"lock-wait", 0, 3600},
    // Monitoring and failure detection
    {"log-interval", 1, kUnbounded},
    {"peak-gflops", 0, kUnbounded},
    {"comm-timeout", 0, kUnbounded},
    {"comm-timeout-startup", 0, kUnbounded},
    {"check-replicas", 0, kUnbounded},
    // Device
    {"threads", 0, kUnbounded},
    {"gpu-workspace-mb", 0, 1 << 20, true},
};

// --help's first lines (at most kHelpWidth columns).
const char* const kIntro =
    "trainer " MPITRAIN_VERSION ": train a GPT-2 or Llama language model with MPI\n"
    "\n"
    "Usage: mpirun -np N trainer [--config FILE] [--option VALUE ...]\n"
    "\n"
    "Options come from the INI file given by --config, one 'name = value' a line (the names\n"
    "below without the dashes), and flags override it; a flag given twice takes its last value.\n"
    "A switch such as --overwrite takes no value (--overwrite=false turns it off again).\n"
    "A number must be finite and inside the range its entry names (flag or file alike).\n";

// Options given as text and converted after parsing, and the INI file's name.
struct RawText {
  std::string arch = "gpt2";
  // The model's switches: auto (the arch's default), true or false.
  std::string tie_embeddings = "auto", attention_bias = "auto", qkv_bias = "auto",
              mlp_bias = "auto";
  std::string micro_batch = "4";
  std::string seed = std::to_string(TrainConfig{}.seed);  // unsigned: "-1" would wrap
  std::string config_file;
  std::string rope_scaling = "none";
  std::string moe_router_score = "softmax";
};

template <typename V>
po::typed_value<V>* with_default(V* target) {
  return po::value<V>(target)->default_value(*target);
}

// A switch whose default is decided later (by the arch, by the run): auto, or a given true /
// false (alone: true).
po::typed_value<std::string>* auto_switch(std::string* target) {
  return po::value<std::string>(target)->default_value(*target)->implicit_value("true")->value_name(
      "auto|true|false");
}

// An auto_switch's value applied to field (auto: leaves the arch's default).
void apply_switch(const char* name, const std::string& value, bool& field) {
  if (value == "auto") return;
  if (value != "true" && value != "false")
    throw UsageError(std::string(name) + " must be auto, true or false (got '" + value + "')");
  field = value == "true";
}

po::typed_value<bool>* flag(bool* target) {
  return po::value<bool>(target)->default_value(*target)->implicit_value(true);
}

// One option a line reads better than clang-format's chains.
// clang-format off
po::options_description general_options(TrainConfig& t, RawText& raw) {
  po::options_description d;
  d.add_options()
      ("help,h", "print this help and exit")
      ("version", "print the version and build (GPU libraries, MPI, HDF5, BLAS, oneDNN) and exit")
      ("config", po::value(&raw.config_file)->value_name("FILE"),
       "INI file with options (flags override it)")
      ("out-dir", with_default(&t.out_dir)->value_name("DIR"),
       "directory for metrics.jsonl, report.json, run.ini and checkpoints")
      ("overwrite", flag(&t.overwrite), "allow writing into an out-dir that already holds files")
      ("lock-wait", with_default(&t.lock_wait)->value_name("SECONDS"),
       "how long to wait for another run's lock on the out-dir (<out-dir>/run.lock) before exit "
       "2 naming its holder");
  return d;
}

po::options_description model_options(ModelConfig& m, TrainConfig& t, RawText& raw) {
  po::options_description d;
  d.add_options()
      ("arch", with_default(&raw.arch)->value_name("gpt2|llama"),
       "gpt2 (LayerNorm, GELU, learned positions, biases, tied embeddings) or llama (RMSNorm, "
       "SwiGLU, RoPE, grouped-query attention)")
      ("n-layer", with_default(&m.n_layer), "transformer blocks")
      ("n-head", with_default(&m.n_head), "attention (query) heads")
      ("n-kv-head", with_default(&m.n_kv_head), "key/value heads (llama GQA); 0 = n-head")
      ("d-model", with_default(&m.d_model), "model width")
      ("d-ff", with_default(&m.d_ff),
       "MLP hidden width; 0 = 4 d-model (gpt2), 8/3 d-model rounded up to 64 (llama)")
      ("vocab-size", with_default(&m.vocab_size),
       "vocabulary; 0 = the training data's vocab_size, else its recorded tokenizer's")
      ("max-seq-len", with_default(&m.max_seq_len), "positions the model supports; 0 = seq-len")
      ("norm-eps", with_default(&m.norm_eps), "epsilon of LayerNorm / RMSNorm")
      ("rope-theta", with_default(&m.rope_theta), "RoPE base (llama)")
      ("tie-embeddings", auto_switch(&raw.tie_embeddings),
       "the output head is the token embedding (no lm_head of its own); auto = gpt2 true, "
       "llama false")
      ("attention-bias", auto_switch(&raw.attention_bias),
       "biases on q, k, v and the attention output (llama's attention_bias); auto = gpt2 true "
       "(always), llama false")
      ("qkv-bias", auto_switch(&raw.qkv_bias),
       "biases on q, k and v only (Qwen2; applied after attention-bias); auto as attention-bias")
      ("mlp-bias", auto_switch(&raw.mlp_bias),
       "biases on the MLP's layers (llama's mlp_bias: gate, up, down); auto = gpt2 true "
       "(always), llama false")
      ("head-dim", with_default(&m.head_dim),
       "attention head size; 0 = d-model / n-head (llama: any even size, n-head x head-dim "
       "need not be d-model)")
      ("init-from", with_default(&t.init_from)->value_name("PATH"),
       "start from an llm.c GPT-2 model file or a Hugging Face directory (config.json and "
       "model.safetensors, gpt2 or llama): it sets the shape")
      ("sliding-window", with_default(&m.sliding_window)->value_name("N"),
       "llama: each query attends to its N latest positions only, itself included (Mistral's "
       "sliding_window, every layer); 0 = every earlier position")
      ("qk-norm", flag(&m.qk_norm),
       "llama: RMSNorm over each query and key head (weights of head size) before RoPE, as Qwen3")
      ("rope-scaling", with_default(&raw.rope_scaling)->value_name("SPEC"),
       "llama: RoPE frequency scaling as transformers' rope_scaling: none, linear:factor=F, "
       "llama3:factor=F,low=L,high=H,orig=N (low/high_freq_factor, "
       "original_max_position_embeddings), or yarn:factor=F,orig=N[,beta_fast=B][,beta_slow=S]"
       "[,attn=A] (YaRN; defaults 32, 1 and 0.1 ln(F) + 1, which multiplies cos and sin)")
      ("gpt2-scale-attn-weights", with_default(&m.scale_attn_weights)->value_name("true|false"),
       "gpt2: divide the attention scores by sqrt(head size) (HF scale_attn_weights)")
      ("gpt2-scale-attn-by-layer", flag(&m.scale_attn_by_inverse_layer_idx),
       "gpt2: divide block l's attention scores by l + 1 too (HF scale_attn_by_inverse_layer_idx)")
      ("n-experts", with_default(&m.n_experts),
       "llama: mixture of experts, routed SwiGLU experts per MoE layer (a router, softmax in "
       "fp32, top-k, dropless); 0 = every MLP dense")
      ("top-k", with_default(&m.top_k),
       "experts each token goes to, their gates renormalised over the chosen (Mixtral) unless "
       "--moe-norm-topk false; ties: the lower expert index wins")
      ("moe-norm-topk", with_default(&m.moe_norm_topk)->value_name("true|false"),
       "the chosen experts' gates renormalised to sum 1 (Mixtral, HF norm_topk_prob true), or "
       "their softmax probabilities over all experts as they are (false: OLMoE, Qwen2-MoE)")
      ("moe-router-score", with_default(&raw.moe_router_score)->value_name("softmax|sigmoid"),
       "the router's scores: the softmax over all experts (Mixtral, Qwen-MoE), or each "
       "expert's sigmoid (DeepSeek-V3, Megatron-Core's moe-router-score-function sigmoid), the "
       "gates then the chosen scores, renormalised under --moe-norm-topk")
      ("moe-expert-bias", flag(&m.moe_expert_bias),
       "sigmoid router: choose the top-k of score + a per-expert bias, the gates without it, "
       "the bias moved by --moe-expert-bias-rate after each step towards equal loads "
       "(DeepSeek-V3's auxiliary-loss-free balancing; kept in checkpoints)")
      ("moe-route-scale", with_default(&m.moe_route_scale),
       "every gate multiplied by this (HF routed_scaling_factor, Megatron-Core's "
       "moe-router-topk-scaling-factor)")
      ("moe-router-groups", with_default(&m.moe_groups)->value_name("G"),
       "group-limited routing (DeepSeek-V3's n_group, Megatron-Core's moe-router-num-groups): "
       "the experts in G equal groups of consecutive indices, each token choosing its top-k "
       "from the --moe-router-group-topk groups whose top top-k / group-topk scores (+ expert "
       "bias) sum highest; 1 = no groups")
      ("moe-router-group-topk", with_default(&m.moe_group_topk)->value_name("M"),
       "--moe-router-groups: the groups each token chooses from (DeepSeek-V3's topk_group, "
       "Megatron-Core's moe-router-group-topk); 0 without groups")
      ("moe-ff", with_default(&m.moe_ff), "each expert's SwiGLU width; 0 = d-ff")
      ("n-shared-experts", with_default(&m.n_shared_experts),
       "experts every token passes besides its routed ones (DeepSeek, Qwen-MoE): one SwiGLU of "
       "n-shared-experts x moe-ff width in each MoE layer")
      ("moe-shared-expert-gate", flag(&m.moe_shared_gate),
       "the shared experts' output times sigmoid(x . w), a learned gate per token and MoE layer "
       "(Qwen2-MoE's shared_expert_gate, Megatron-Core's moe-shared-expert-gate)")
      ("moe-every", with_default(&m.moe_every),
       "layer l (from 0) is MoE when l + 1 is a multiple of this (HF decoder_sparse_step); the "
       "others keep a dense MLP of d-ff")
      ("moe-first-dense", with_default(&m.moe_first_dense)->value_name("K"),
       "the first K layers keep a dense MLP of d-ff whatever --moe-every (DeepSeek's and GLM's "
       "first_k_dense_replace, torchtitan's n_dense_layers, Megatron-Core's moe-layer-freq "
       "[0]*K+[1]*N; HF qwen3_moe's mlp_only_layers [0, ..., K-1])");
  return d;
}

po::options_description data_options(TrainConfig& t) {
  po::options_description d;
  d.add_options()
      ("train-data", with_default(&t.train_data)->value_name("SPEC"),
       "training tokens (required, except by --steps 0 from an explicit --resume or "
       "--init-from): HDF5 (/tokens), llm.c shards, nanoGPT .bin, mixed; a comma-separated list "
       "of files and globs ('shards/fw_train_*.bin,extra.h5'), concatenated, or a blend with a "
       "weight on every entry ('0.7:web/*.bin, 0.3:code.h5', normalised); give it once")
      ("val-data", with_default(&t.val_data)->value_name("SPEC"),
       "validation tokens, the same syntax; evaluation reads the first eval-samples of the "
       "files in order (weights ignored); '' = none")
      ("data-format", with_default(&t.data_format)->value_name("auto|hdf5|llmc|nanogpt|megatron"),
       "format of the token files; auto detects it per file (megatron: PREFIX.bin + PREFIX.idx, "
       "named by the .bin or the prefix)")
      ("skip-data-check", flag(&t.skip_data_check),
       "skip the start-up scan (split over the ranks) that every token id is below vocab-size "
       "and every loss-mask byte 0 or 1: for trusted data only, an id out of range is then "
       "undefined behaviour (a mask byte above 1 scores its target)")
      ("prefetch", flag(&t.prefetch),
       "read the next micro-batches in a background thread while the step computes (not for "
       "chunked or compressed HDF5 files, which are read on the main thread); false = in step")
      ("shuffle", flag(&t.shuffle), "a seeded permutation of the samples per epoch")
      ("document-mask", flag(&t.document_mask),
       "attention within each document only (Megatron's reset-attention-mask, torchtitan's "
       "block_causal): a token sees no position before its document's first, in training and "
       "evaluation; a document starts at each BOS / <|endoftext|> of the tokenizer (the one the "
       "data record, or --tokenizer), or after each EOS where it has no BOS; positions run on "
       "unless --document-positions")
      ("document-positions", flag(&t.document_positions),
       "with --document-mask: each token's position counts from its document's first token "
       "(Megatron's reset-position-ids), for gpt2's learned positions and RoPE alike: a packed "
       "document then trains as it would alone")
      ("mask-boundary-loss", flag(&t.mask_boundary_loss),
       "no loss where the input is the tokenizer's document boundary, whose next token is a "
       "document's first (Megatron's eod-mask-loss): after an EOS it lies in the next document; "
       "the loss is then the mean over the step's scored tokens, in training and evaluation")
      ("eval-interval", with_default(&t.eval_interval),
       "steps between validation losses; 0 = only at the end")
      ("eval-samples", with_default(&t.eval_samples), "validation sequences per evaluation")
      ("sample-tokens", with_default(&t.sample_tokens), "tokens of text generated at the end")
      ("sample-prompt", with_default(&t.sample_prompt),
       "text the sample starts from; '' = a newline")
      ("sample-temperature", with_default(&t.sample_temperature),
       "sampling temperature: softmax(logits / T), before the top-k and top-p cuts; 0 = greedy")
      ("sample-top-k", with_default(&t.sample_top_k),
       "sample among the k most likely tokens only; 0 = all")
      ("sample-top-p", with_default(&t.sample_top_p),
       "then among the fewest most likely of those whose tempered probability sums to p "
       "(nucleus); 1 = all")
      ("tokenizer", with_default(&t.tokenizer)->value_name("PATH"),
       "tokenizer of the sample (a tokenizer.json or a directory holding one), over the one the "
       "data records or the resumed run's <run dir>/tokenizer/; '' = those");
  return d;
}

po::options_description training_options(TrainConfig& t, RawText& raw) {
  po::options_description d;
  d.add_options()
      ("steps", with_default(&t.steps), "optimizer steps; 0 = evaluate (and sample) only")
      ("global-batch-size", with_default(&t.global_batch_size),
       "sequences per optimizer step over all ranks")
      ("micro-batch-size", with_default(&raw.micro_batch)->value_name("N|auto"),
       "sequences per forward/backward on one rank (the rest is gradient accumulation), or auto: "
       "the largest that the memory plan fits, printed before the first step")
      ("seq-len", with_default(&t.seq_len), "tokens per training sequence")
      ("seed", with_default(&raw.seed)->value_name("N"),
       "seed for initialisation, data order and sampling (0 to 2^64 - 1)")
      ("lr", with_default(&t.lr), "peak learning rate")
      ("lr-schedule", with_default(&t.lr_schedule)->value_name("cosine|linear|constant|wsd"),
       "decay after the warm-up; wsd (warmup-stable-decay): lr held until the decay over the "
       "last lr-wsd-decay-steps steps")
      ("lr-wsd-decay-steps", with_default(&t.lr_wsd_decay_steps),
       "lr-schedule wsd: the last steps of the schedule, over which the lr decays to "
       "min-lr-ratio x lr (Megatron's --lr-wsd-decay-iters)")
      ("lr-wsd-decay-style",
       with_default(&t.lr_wsd_decay_style)->value_name("linear|cosine|sqrt|exponential"),
       "lr-schedule wsd: the decay's shape over its progress q: 1 - q, (1 + cos(pi q)) / 2, "
       "1 - sqrt(q), 2 x 0.5^q - 1 (Megatron's --lr-wsd-decay-style, minus_sqrt for sqrt)")
      ("warmup-steps", with_default(&t.warmup_steps), "linear warm-up steps")
      ("lr-decay-steps", with_default(&t.lr_decay_steps),
       "steps the schedule spans, warm-up included (Megatron's --lr-decay-iters); 0 = --steps of "
       "the run that started it: a resume keeps the length its checkpoint records, whatever "
       "its --steps")
      ("min-lr-ratio", with_default(&t.min_lr_ratio), "final lr as a fraction of lr")
      ("optimizer", with_default(&t.optimizer)->value_name("adamw|sgd|lamb"),
       "AdamW, SGD with momentum (PyTorch's buffer) or LAMB (AdamW with per-tensor trust ratios)")
      ("momentum", with_default(&t.momentum), "sgd momentum")
      ("weight-decay", with_default(&t.weight_decay),
       "decoupled weight decay (all optimizers; none on norms and biases)")
      ("beta1", with_default(&t.beta1), "AdamW / LAMB beta1")
      ("beta2", with_default(&t.beta2), "AdamW / LAMB beta2")
      ("adam-eps", with_default(&t.adam_eps), "AdamW / LAMB epsilon")
      ("grad-clip", with_default(&t.grad_clip), "clip the global gradient norm to this; 0 = off")
      ("moe-aux-loss-coef", with_default(&t.moe_aux_loss_coef),
       "n-experts > 0: weight of the load-balancing loss E sum_e f_e P_e of each MoE layer "
       "(Switch, Mixtral's router_aux_loss_coef) added to the objective; reported apart from the "
       "loss")
      ("moe-aux-loss-form",
       with_default(&t.moe_aux_loss_form)->value_name("auto|per-layer|all-layers"),
       "n-experts > 0: per-layer = each MoE layer's load-balancing loss over its own routing, "
       "summed over the layers, as Megatron-Core's aux_loss (whose f_e also divides by top-k: "
       "its moe-aux-loss-coeff c is c / top-k here); all-layers = one loss over the routing of "
       "all MoE layers pooled (transformers' load_balancing_loss_func of Mixtral and Qwen3-MoE); "
       "auto = all-layers for an --init-from Hugging Face model, else per-layer")
      ("moe-expert-bias-rate", with_default(&t.moe_expert_bias_rate),
       "--moe-expert-bias: after each step every MoE layer's bias b_e += rate x sign(mean load "
       "- expert e's load), the loads the step's tokens routed to each expert over all ranks "
       "(Megatron-Core's moe-router-bias-update-rate)")
      ("moe-z-loss-coef", with_default(&t.moe_z_loss_coef),
       "n-experts > 0: weight of the router z-loss mean(logsumexp(logits)^2) of each MoE layer "
       "(ST-MoE); reported apart from the loss");
  return d;
}

po::options_description parallel_options(TrainConfig& t) {
  po::options_description d;
  d.add_options()
      ("dp", with_default(&t.dp), "data-parallel ranks; 0 = world size / (tp x pp)")
      ("tp", with_default(&t.tp), "tensor-parallel ranks (Megatron); 0 = derived, else 1")
      ("pp", with_default(&t.pp), "pipeline stages; 0 = derived, else 1")
      ("cp", with_default(&t.cp),
       "context-parallel ranks: each sequence cut into 2 x cp chunks, rank r holding chunks r and "
       "2cp-1-r, attention a ring over them")
      ("ep", with_default(&t.ep),
       "expert-parallel ranks (MoE): the routed experts split over ep consecutive dp ranks, "
       "tokens sent to their experts' rank by all-to-alls; divides dp and n-experts")
      ("pp-layers", with_default(&t.pp_layers)->value_name("N,N,..."),
       "blocks per pipeline stage, e.g. 3,3,2; '' = balanced")
      ("pp-schedule", with_default(&t.pp_schedule)->value_name("gpipe|1f1b"), "pipeline schedule")
      ("sequence-parallel", flag(&t.sequence_parallel),
       "with tp > 1: the norms, residual adds and embedding output on 1/tp of the rows per rank "
       "(Megatron's sequence parallelism): their activations / tp, the tp all-reduces become "
       "reduce-scatter / all-gather pairs; seq-len must be divisible by tp")
      ("bucket-mb", with_default(&t.bucket_mb), "data-parallel gradient all-reduce bucket (MiB)")
      ("zero", with_default(&t.zero),
       "sharding over dp: 1 = ZeRO-1, optimizer state and master weights (reduce-scatter the "
       "gradients, update the own shard, all-gather the parameters); 2 = also the gradients, "
       "reduce-scattered block by block during backward; 3 = also the parameters (FSDP), "
       "all-gathered block by block before use; 0 = replicated")
      ("zero3-reshard-after-forward", flag(&t.zero3_reshard_after_forward),
       "zero 3: free each block's gathered parameters after its forward and gather them again "
       "for its backward (false: keep every gathered block until the update: less "
       "communication, the memory of the whole stage)")
      ("zero3-prefetch", flag(&t.zero3_prefetch),
       "zero 3: start the next block's all-gather while the current block computes")
      ("zero-shard-size", with_default(&t.zero_shard_size),
       "zero 2/3: shard over groups of this many data-parallel ranks and replicate across the "
       "groups (hybrid sharding, FSDP's HSDP); 0 = the whole data-parallel group")
      ("grad-compress", with_default(&t.grad_compress)->value_name("none|bf16|fp16|int8|topk"),
       "data-parallel gradient compression: bf16, fp16 (2 bytes a value), int8 (1 byte + a scale "
       "per chunk) or topk (the largest --topk-ratio of each bucket); int8 and topk keep error "
       "feedback. Sums are taken in fp32. Not with --zero")
      ("topk-ratio", with_default(&t.topk_ratio), "topk: fraction of each bucket's values sent");
  return d;
}

po::options_description memory_options(TrainConfig& t) {
  po::options_description d;
  d.add_options()
      ("precision", with_default(&t.precision)->value_name("fp32|bf16|fp16"),
       "bf16 / fp16: activations and compute weights in that precision (round to nearest even), "
       "fp32 master weights, optimizer state, reductions and loss")
      ("recompute", with_default(&t.recompute)->value_name("none|selective|full"),
       "activation recomputation in backward: the attention, or each block")
      ("device-memory-gib", with_default(&t.device_memory_gib),
       "memory per rank that the start-up check (a model that cannot fit is refused) and "
       "micro-batch-size auto plan for; 0 = the GPU's free memory (cuda), or available memory "
       "(or the cgroup's room) / ranks on the node (cpu)")
      ("initial-loss-scale", with_default(&t.initial_loss_scale), "fp16: the first loss scale")
      ("loss-scale-window", with_default(&t.loss_scale_window),
       "fp16: steps without overflow before the loss scale doubles")
      ("min-loss-scale", with_default(&t.min_loss_scale),
       "fp16: the loss scale never goes below this");
  return d;
}

po::options_description checkpoint_options(TrainConfig& t) {
  po::options_description d;
  d.add_options()
      ("save-interval", with_default(&t.save_interval),
       "steps between checkpoints under <out-dir>/checkpoints, plus one at the end; 0 = none")
      ("keep-last", with_default(&t.keep_last),
       "step checkpoints kept (older ones deleted); 0 = all")
      ("async-save", auto_switch(&t.async_save),
       "copy the state at the save's step and write it in a background thread while training "
       "goes on (one save in flight; every exit waits for it to commit); auto = so where the "
       "writer has a CPU to itself (a GPU run, one rank, or ranks whose threads leave a CPU of "
       "each host free), else synchronous saves until one takes 2 s or more, then in the "
       "background; false, or when the copy does not fit in host memory (said at start-up) = "
       "the steps wait for the write")
      ("resume", with_default(&t.resume)->value_name("auto|PATH"),
       "auto = continue from the newest valid checkpoint in out-dir if there is one; or a run "
       "directory, its checkpoints/ (both: the newest valid checkpoint), a step-N directory or "
       "its checkpoint.h5, whose model shape then needs no model options; '' = start fresh")
      ("allow-seed-change", flag(&t.allow_seed_change),
       "resume although the checkpoint was written under another seed (a new data order from "
       "there on); without it that is refused")
      ("allow-data-change", flag(&t.allow_data_change),
       "resume although the training data differ from those the checkpoint records (other "
       "files, token counts or weights, --shuffle or --seq-len); without it that is refused")
      ("save-best", flag(&t.save_best),
       "keep the checkpoint with the lowest validation loss as best/")
      ("exit-after-minutes", with_default(&t.exit_after_minutes),
       "save and exit with code 85 before this many minutes of wall time; 0 = off")
      ("exit-at-step", with_default(&t.exit_at_step),
       "save and exit with code 85 after this step (a run in pieces, restart tests); 0 = off")
      ("export-llmc", with_default(&t.export_llmc)->value_name("FILE"),
       "at the end, write the gpt2 model in llm.c's format to this file")
      ("export-params", with_default(&t.export_params)->value_name("FILE"),
       "at the end, write every parameter with its full shape to this HDF5 file")
      ("export-hf", with_default(&t.export_hf)->value_name("DIR"),
       "at the end, write a Hugging Face checkpoint (config.json, model.safetensors) to this "
       "new directory")
      ("export-hf-shard-size", with_default(&t.export_hf_shard_size)->value_name("SIZE"),
       "--export-hf: tensors past this size go into model-0000N-of-0000M.safetensors files of "
       "at most it each, with model.safetensors.index.json (transformers' max_shard_size: "
       "bytes, or 500MB, 5GB, 2GiB)");
  return d;
}

po::options_description monitoring_options(TrainConfig& t) {
  po::options_description d;
  d.add_options()
      ("trace", with_default(&t.trace)->value_name("DIR"),
       "write a Chrome-trace / Perfetto timeline per rank to <dir>/trace-rank<R>.json; '' = off")
      ("tensorboard", with_default(&t.tensorboard)->value_name("DIR"),
       "write TensorBoard scalar events (loss, lr, throughput, time breakdown) to <dir>; '' = off")
      ("log-interval", with_default(&t.log_interval),
       "steps per console line (the first and last step always; the loss averaged over the "
       "interval); metrics.jsonl has every step")
      ("peak-gflops", with_default(&t.peak_gflops),
       "peak GFLOP/s of one rank for MFU; 0 = the sgemm rate per CPU x this rank's share of "
       "its host's CPUs, measured at every start; the highest uncontended rate per host, "
       "threads and allowed CPUs is kept in $MPITRAIN_PEAK_CACHE (default "
       "~/.cache/mpitrain/peak-gflops.jsonl)")
      ("profile-ops", flag(&t.profile_ops),
       "CPU: time every backend op; at the end rank 0 prints where its steps' time went, op by "
       "op, against each op's floor (FLOPs at the sgemm rate, bytes at the measured memory "
       "bandwidth), also written to <out-dir>/op_profile.txt")
      ("comm-timeout", with_default(&t.comm_timeout),
       "seconds a communication call may block once the first step has finished; then every rank "
       "that sees it reports the call and which ranks did not arrive, and the job exits 3; 0 = no "
       "limit")
      ("comm-timeout-startup", with_default(&t.comm_timeout_startup),
       "the same limit until the first step has finished; 0 = no limit")
      ("on-nan", with_default(&t.on_nan)->value_name("stop|skip"),
       "a non-finite loss or gradient: stop (write <out-dir>/nonfinite-step-<S>.json, exit 1) or "
       "skip (no update that step, counted); fp16 runs skip and lower the loss scale instead")
      ("check-replicas", with_default(&t.check_replicas),
       "every N steps compare a checksum of the data-parallel replicas' parameters; a difference "
       "stops the run (exit 1); 0 = off (and by default under --zero 3, where no rank holds a "
       "whole copy)");
  return d;
}

po::options_description device_options(TrainConfig& t) {
  po::options_description d;
  d.add_options()
      ("device", with_default(&t.device)->value_name("cpu|cuda"),
       "cuda: GPU local rank % visible GPUs (CUDA_VISIBLE_DEVICES applies)")
      ("threads", with_default(&t.threads),
       "threads per rank; 0 = OMP_NUM_THREADS, else cores per node / ranks per node")
      ("huge-pages", flag(&t.huge_pages),
       "cpu: tensors of 2 MiB or more on 2 MiB transparent huge pages (madvise; granted where "
       "/sys/kernel/mm/transparent_hugepage/enabled is always or madvise); false = 4 KiB pages")
      ("comm", with_default(&t.comm)->value_name("auto|nccl|mpi"),
       "cuda: what moves tensors between ranks: nccl (a GPU per rank), mpi (through pinned host "
       "buffers; ranks may share a GPU), or auto = nccl unless ranks share a GPU")
      ("kernels", with_default(&t.kernels)->value_name("cudnn|cuda"),
       "cuda: cudnn (cuBLASLt GEMMs, cuDNN attention and norms) or cuda (own kernels only)")
      ("tf32", flag(&t.tf32), "cuda, precision fp32: allow TF32 tensor-core GEMMs")
      ("gpu-workspace-mb", with_default(&t.gpu_workspace_mb),
       "cuda: workspace for cuBLASLt / cuDNN and low-precision operand copies");
  return d;
}

// clang-format on

// Every option, under the headings of --help, in the order a user meets them.
std::vector<HelpGroup> option_groups(Options& o, RawText& raw) {
  TrainConfig& t = o.train;
  return {{"General", general_options(t, raw)},
          {"Model", model_options(o.model, t, raw)},
          {"Data and evaluation", data_options(t)},
          {"Training", training_options(t, raw)},
          {"Parallelism", parallel_options(t)},
          {"Precision and memory", memory_options(t)},
          {"Checkpoints and exports", checkpoint_options(t)},
          {"Monitoring and failure detection", monitoring_options(t)},
          {"Device", device_options(t)}};
}

// A positive integer written as text (an option that also takes a word, like "auto").
int parse_positive(const std::string& text, const char* name) {
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  require(used > 0 && used == text.size() && value > 0,
          std::string(name) + " must be a positive integer or auto (got '" + text + "')");
  return value;
}

// An unsigned 64-bit integer written as text: digits alone (no sign), at most 2^64 - 1.
uint64_t parse_seed(const std::string& text) {
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  require(!text.empty() && error == std::errc() && end == text.data() + text.size(),
          "seed must be an integer from 0 to 18446744073709551615 (got '" + text + "')");
  return value;
}

// Choices and the checks between options (ranges: kRanges); sets the fields converted from text.
void check_train(TrainConfig& t, const RawText& raw) {
  t.seed = parse_seed(raw.seed);
  t.micro_batch_size =
      raw.micro_batch == "auto" ? 0 : parse_positive(raw.micro_batch, "micro-batch-size");
  require(t.comm == "auto" || t.comm == "nccl" || t.comm == "mpi",
          "comm must be auto, nccl or mpi, not '" + t.comm + "'");
  require(t.async_save == "auto" || t.async_save == "true" || t.async_save == "false",
          "async-save must be auto, true or false, not '" + t.async_save + "'");
  require(t.comm != "nccl" || t.device == "cuda", "--comm nccl needs --device cuda");
  require(t.device == "cpu" || t.device == "cuda",
          "device must be cpu or cuda, not '" + t.device + "'");
#ifndef MPITRAIN_HAVE_CUDA
  require(t.device == "cpu",
          "--device cuda: this build has no CUDA backend (configure with -DMPITRAIN_CUDA=ON)");
#endif
  require(t.huge_pages || t.device == "cpu",
          "--huge-pages false is for the CPU backend's tensors: --device cuda keeps them in GPU "
          "memory");
  require(t.kernels == "cudnn" || t.kernels == "cuda",
          "kernels must be cudnn or cuda, not '" + t.kernels + "'");
  require(parse_grad_compress(t.grad_compress) == GradCompress::None || t.zero == 0,
          "grad-compress " + t.grad_compress + " is not supported with zero " +
              std::to_string(t.zero) +
              " (ZeRO's reduce-scatter and all-gather are not compressed): use one or the other");
  parse_nan_policy(t.on_nan);
  parse_optimizer(t.optimizer);
  parse_precision(t.precision);
  parse_recompute(t.recompute);
  if (t.moe_aux_loss_form != "auto") parse_moe_aux_loss(t.moe_aux_loss_form);
  require(t.min_loss_scale <= t.initial_loss_scale,
          "min-loss-scale must not exceed initial-loss-scale");
  // --steps 0 of an explicit checkpoint or an --init-from model: evaluate, sample or export it.
  const bool has_weights = (!t.resume.empty() && t.resume != "auto") || !t.init_from.empty();
  require(!t.train_data.empty() || (t.steps == 0 && has_weights),
          t.steps == 0 ? "no training data: set train-data (a file made by prepare-data), or "
                         "--resume a checkpoint or --init-from a model to evaluate or sample it"
                       : "no training data: set train-data (a file made by prepare-data)");
  require(t.data_format == "auto" || t.data_format == "hdf5" || t.data_format == "llmc" ||
              t.data_format == "nanogpt" || t.data_format == "megatron",
          "data-format must be auto, hdf5, llmc, nanogpt or megatron, not '" + t.data_format + "'");
}

// Options changed (Options::changed) that this run would not use (never dropped silently): a
// learning-rate decay that cannot start, evaluation without validation data, a sample of no
// tokens or drawn greedily, the GPU's options on the CPU, a stop after the last step.
void check_given(const Options& o) {
  const TrainConfig& t = o.train;
  const TrainConfig defaults;
  const bool decay_steps = t.lr_decay_steps > 0;  // 0: the run's steps
  const bool ratio = o.changed("min-lr-ratio", t.min_lr_ratio, defaults.min_lr_ratio);
  const bool schedule = o.changed("lr-schedule", t.lr_schedule, defaults.lr_schedule);
  const std::string warmup = "warmup-steps " + std::to_string(t.warmup_steps);
  if (t.lr_schedule == "constant")
    require(!ratio && !decay_steps,
            std::string(ratio ? "min-lr-ratio" : "lr-decay-steps") +
                " sets the decay, and lr-schedule constant has none: give lr-schedule cosine or "
                "linear, or leave it out");
  require(!decay_steps || t.lr_decay_steps > t.warmup_steps,
          "lr-decay-steps " + std::to_string(t.lr_decay_steps) + " must exceed " + warmup +
              ": the decay starts after the warm-up (as Megatron-LM's "
              "lr-decay-iters must exceed lr-warmup-iters)");
  // A resume's schedule may take the checkpoint's length, known later (resume_schedule).
  if (t.steps > 0 && t.resume.empty() && !decay_steps && t.warmup_steps >= t.steps &&
      t.lr_schedule != "constant")
    require(!schedule && !ratio, std::string(schedule ? "lr-schedule" : "min-lr-ratio") +
                                     " shapes the decay after the warm-up, and " + warmup +
                                     " covers the whole run (steps " + std::to_string(t.steps) +
                                     "): give fewer warm-up steps or more steps");
  const std::string eval =
      " sets up the evaluation on --val-data, and none is given: give it, or leave this out";
  const bool val = !t.val_data.empty();  // (eval-interval 0, at the end only: none without)
  o.require_used(val || t.eval_interval == 0, "eval-interval", t.eval_interval,
                 defaults.eval_interval, eval);
  o.require_used(val, "eval-samples", t.eval_samples, defaults.eval_samples, eval);
  const std::string sample =
      " shapes the text sample, and sample-tokens is 0 (none): give it tokens, or leave this out";
  const bool sampled = t.sample_tokens > 0;
  o.require_used(sampled, "sample-prompt", t.sample_prompt, defaults.sample_prompt, sample);
  o.require_used(sampled, "sample-temperature", t.sample_temperature, defaults.sample_temperature,
                 sample);
  // temperature 0 is greedy: the most likely token, whatever the candidates
  const std::string candidates =
      sampled ? std::string(
                    " chooses the tokens to sample among, and sample-temperature 0 takes "
                    "the most likely one: leave one of them out")
              : sample;
  const bool drawn = sampled && t.sample_temperature != 0;
  o.require_used(drawn, "sample-top-k", t.sample_top_k, defaults.sample_top_k, candidates);
  o.require_used(drawn, "sample-top-p", t.sample_top_p, defaults.sample_top_p, candidates);
  // The GPU backend's options, given to the CPU's (huge-pages the other way: check_train).
  const std::string gpu = " sets up the GPU backend, and this run is --device " + t.device +
                          ": give --device cuda, or leave it out";
  const bool cuda = t.device == "cuda";
  o.require_used(cuda, "kernels", t.kernels, defaults.kernels, gpu);
  o.require_used(cuda, "tf32", t.tf32, defaults.tf32, gpu);
  o.require_used(cuda, "gpu-workspace-mb", t.gpu_workspace_mb, defaults.gpu_workspace_mb, gpu);
  require(t.exit_at_step == 0 || t.steps == 0 || t.exit_at_step <= t.steps,
          "exit-at-step " + std::to_string(t.exit_at_step) + " comes after the run's last step (" +
              std::to_string(t.steps) + "): it would never stop the run");
}

// Every option's final value, INI syntax (run.ini, and the options the ranks compare).
std::string effective_ini(const po::variables_map& vm) {
  std::ostringstream eff;
  eff.precision(12);
  for (const auto& [name, value] : vm) {
    if (name == "help" || name == "config") continue;
    eff << name << " = ";
    const boost::any& v = value.value();
    if (auto* s = boost::any_cast<std::string>(&v)) eff << *s;
    else if (auto* i = boost::any_cast<int>(&v)) eff << *i;
    else if (auto* u = boost::any_cast<uint64_t>(&v)) eff << *u;
    else if (auto* d = boost::any_cast<double>(&v)) eff << *d;
    else if (auto* f = boost::any_cast<float>(&v)) eff << *f;
    else if (auto* b = boost::any_cast<bool>(&v)) eff << (*b ? "true" : "false");
    eff << "\n";
  }
  return eff.str();
}

}  // namespace

const std::vector<OptionRange>& trainer_option_ranges() { return kRanges; }

Options parse_options(int argc, const char* const* argv) {
  Options o;
  ModelConfig& m = o.model;
  // Model fields resolved later when left at 0.
  m.vocab_size = 0;
  m.d_ff = 0;
  m.n_kv_head = 0;
  m.max_seq_len = 0;
  RawText raw;
  const std::vector<HelpGroup> groups = option_groups(o, raw);
  po::options_description all;
  for (const HelpGroup& group : groups) all.add(group.options);

  po::variables_map vm;
  try {
    po::store(parse_last_wins(argc, argv, all, {"train-data", "val-data"}), vm);
    if (vm.count("help") || vm.count("version")) {
      o.print_instead =
          vm.count("help")
              ? format_help(kIntro, groups, kHelpWidth,
                            [](const std::string& name) { return range_note(kRanges, name); })
              : build_info("trainer");
      return o;
    }
    if (vm.count("config")) {
      raw.config_file = vm["config"].as<std::string>();
      std::ifstream in = open_text_file(raw.config_file, "config file");
      po::store(parse_ini(in, all), vm);  // flags stored first win
    }
    po::notify(vm);
  } catch (const po::error& e) {
    const std::string where = raw.config_file.empty() ? "" : "config " + raw.config_file + ": ";
    throw UsageError(where + e.what() + "; see --help");
  }

  m.set_arch(parse_arch(raw.arch));  // its defaults, then the model switches given
  apply_switch("tie-embeddings", raw.tie_embeddings, m.tie_embeddings);
  apply_switch("attention-bias", raw.attention_bias, m.proj_bias);
  apply_switch("attention-bias", raw.attention_bias, m.qkv_bias);
  apply_switch("qkv-bias", raw.qkv_bias, m.qkv_bias);
  apply_switch("mlp-bias", raw.mlp_bias, m.mlp_bias);
  m.rope_scaling = parse_rope_scaling(raw.rope_scaling);
  if (raw.moe_router_score != "softmax" && raw.moe_router_score != "sigmoid")
    throw UsageError("moe-router-score must be softmax or sigmoid, not '" + raw.moe_router_score +
                     "'");
  m.moe_sigmoid = raw.moe_router_score == "sigmoid";
  for (const auto& [name, value] : vm)
    if (!value.defaulted()) o.given.push_back(name);
  check_ranges(kRanges, vm);
  check_train(o.train, raw);
  check_given(o);
  o.effective = effective_ini(vm);
  return o;
}

}  // namespace mpitrain
