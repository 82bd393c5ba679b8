// The model's final shape: options, completed from the training data and the init file.
#pragma once

#include "mpitrain/app/options.hpp"
#include "mpitrain/ckpt/checkpoint.hpp"
#include "mpitrain/data/token_source.hpp"

namespace mpitrain {

// Fills what options left at 0: vocab-size from the data's declared vocab_size, else from its
// recorded tokenizer's (tokenizer_vocab; -1: none), n-kv-head = n-head, d-ff by the
// architecture's rule, max-seq-len = seq-len. With init-from, the llm.c file's header is the
// shape, and a model option the user set that disagrees is a UsageError. train_data: null when
// there is none (evaluating a checkpoint).
ModelConfig resolve_model_config(const Options& options, const TokenSource* train_data,
                                 int64_t tokenizer_vocab);

// A resume's checkpoint (an explicit --resume PATH, or the one --resume auto would load): its
// model is the shape (a model option the user set that disagrees: UsageError naming it and both
// values; init-from with a PATH: UsageError), and seq-len, seed, shuffle (where recorded),
// optimizer, global-batch-size, micro-batch-size (when the batch divides by dp x it) and an MoE
// run's loss coefficients (where recorded) are the checkpoint's unless the user set them, and so
// are its kept settings (train/kept_settings.hpp: precision, optimizer, lr schedule). Returns
// the line naming the kept settings given with other values ("" where none).
std::string take_checkpoint_settings(Options& options, const CheckpointManifest& checkpoint,
                                     const std::string& path, int dp);

// An MoE model's aux loss: --moe-aux-loss-form auto becomes all-layers for an --init-from
// Hugging Face directory (transformers' form), per-layer otherwise; of such a directory, its
// config.json's router_aux_loss_coef becomes --moe-aux-loss-coef unless the user set that
// (model/hf_config.hpp's HfRouterKeys). Returns, for such a directory, the line saying which
// coefficient and form the run takes, and from where ("" otherwise).
std::string take_router_settings(Options& options, const ModelConfig& model);

// The line naming an --init-from Hugging Face model's YaRN factor where its config.json's
// max_position_embeddings / original_max_position_embeddings differs from it (the model takes the
// factor, as current transformers; some earlier releases took that ratio); "" otherwise.
std::string describe_yarn_factor(const Options& options, const ModelConfig& model);

}  // namespace mpitrain
