// llm.c's GPT-2 model file (train_gpt2.c / train_gpt2.cu): import and export.
//
// Layout: header int32[256] (1024 bytes): [0] magic 20240326, [1] version (3 = fp32, 5 = bf16 as
// raw uint16), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp; then 16 tensors back to back:
//   wte (Vp, C), wpe (maxT, C), ln1w (L, C), ln1b (L, C), qkvw (L, 3C, C), qkvb (L, 3C),
//   attprojw (L, C, C), attprojb (L, C), ln2w (L, C), ln2b (L, C), fcw (L, 4C, C), fcb (L, 4C),
//   fcprojw (L, C, 4C), fcprojb (L, C), lnfw (C), lnfb (C)
// Each (L, ...) tensor stacks all layers; our flat buffer keeps each layer's tensors together
// (params.hpp), so import and export regroup them. Little-endian, as llm.c writes it.
#pragma once

#include <string>

#include "mpitrain/model/config.hpp"
#include "mpitrain/model/params.hpp"

namespace mpitrain {

enum class LlmcDtype { Fp32 = 3, Bf16 = 5 };  // the header's version field

// Reads and checks the header; returns the gpt2 config it describes (n_kv_head = n_head,
// d_ff = 4 d_model, norm_eps 1e-5). UsageError naming the file if it is missing or unreadable,
// has the wrong magic, an unknown version, a Vp other than padded_vocab(V), an invalid shape, or a
// size that does not match the header's tensors.
ModelConfig read_llmc_config(const std::string& path);

// Loads the 16 tensors into params (layout.total() floats, layout built from config); bf16 is
// widened exactly. wte's padding rows V..Vp-1 keep the file's values. UsageError naming the file
// and the field if the file's config differs from config.
void load_llmc_model(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                     float* params);

// UsageError naming path when llm.c's format cannot hold the model (not gpt2, d_ff != 4 d_model,
// norm_eps != 1e-5): checked before training, so that --export-llmc cannot fail at the end.
void require_llmc_expressible(const std::string& path, const ModelConfig& config);

// Writes a gpt2 model (bf16: round to nearest even, NaN stays NaN) to path + ".tmp", syncs it and
// renames it to path, so path never holds a partial file. UsageError for a config llm.c cannot
// express (not gpt2, d_ff != 4 d_model, norm_eps != 1e-5) or a path that cannot be created;
// Error if writing fails midway (the .tmp file is removed).
void save_llmc_model(const std::string& path, const ModelConfig& config, const ParamLayout& layout,
                     const float* params, LlmcDtype dtype);

}  // namespace mpitrain
