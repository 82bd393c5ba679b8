// A Hugging Face checkpoint directory: config.json and model.safetensors (fp32), in the
// conventions of `transformers`, so that `GPT2LMHeadModel.from_pretrained(dir)` and
// `LlamaForCausalLM.from_pretrained(dir)` read what the trainer wrote, and the trainer reads
// (--init-from) what they save in fp32, fp16 or bf16.
//
// safetensors: u64 little-endian N, an N-byte JSON header {name: {dtype, shape, data_offsets}},
// then the raw little-endian tensors (offsets from the end of the header).
//
// Names and layouts (ours in params.hpp; V the real vocabulary, the padding rows are dropped):
//   gpt2   transformer.wte.weight (V, C), transformer.wpe.weight (maxT, C),
//          transformer.h.<l>.{ln_1,ln_2}.{weight,bias},
//          transformer.h.<l>.attn.c_attn.{weight (C, 3C), bias}, .attn.c_proj.{weight (C, C),
//          bias}, transformer.h.<l>.mlp.c_fc.{weight (C, F), bias}, .mlp.c_proj.{weight (F, C),
//          bias}, transformer.ln_f.{weight,bias}, lm_head.weight (V, C) unless tied to wte. HF's
//          Conv1D keeps weights as (in, out): ours (out, in) transposed.
//   llama  model.embed_tokens.weight (V, C), model.layers.<l>.input_layernorm.weight,
//          .self_attn.{q_proj (NH hs, C), k_proj (NKV hs, C), v_proj (NKV hs, C),
//          o_proj (C, NH hs)}.weight, .post_attention_layernorm.weight,
//          .mlp.{gate_proj (F, C), up_proj (F, C), down_proj (C, F)}.weight,
//          model.norm.weight, lm_head.weight (V, C) unless tied to embed_tokens; with biases
//          .self_attn.{q,k,v}_proj.bias (qkv_bias), .self_attn.o_proj.bias (proj_bias; with
//          qkv_bias: attention_bias, without: model_type qwen2), .mlp.{gate,up,down}_proj.bias
//          (mlp_bias). hs = head_dim.
//          Our RoPE rotates interleaved pairs (2i, 2i+1) of a head, HF's rotate-half pairs
//          (i, i + hs/2): q and k rows (and biases) are permuted per head, HF row a hs/2 + i = our
//          row 2i + a.
#pragma once

#include <string>

#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/model/params.hpp"

namespace mpitrain {

// A directory holding config.json and model.safetensors.
bool is_hf_dir(const std::string& path);

// The model config.json describes. UsageError naming the file and the field when it is
// unreadable, not JSON, of another model_type, or lacks a field or holds one out of range.
ModelConfig read_hf_config(const std::string& dir);

// Loads model.safetensors into params (layout.total() floats, layout built from config); the
// padding rows of the vocabulary tables are zero. UsageError naming the file and the tensor when
// one is missing, of another shape or dtype, or outside the file.
void load_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                   float* params);

// UsageError unless transformers has a model for config (Qwen2, the q/k/v biases without an
// o_proj bias, has no MLP biases).
void require_hf_expressible(const std::string& dir, const ModelConfig& config);

// Writes config.json and model.safetensors (fp32) into dir.tmp, with the tokenizer's files when
// one is given (gpt2: vocab.json + merges.txt, sentencepiece: tokenizer.model, huggingface:
// tokenizer.json + tokenizer_config.json; bytes and llm.c's decode-only gpt2_tokenizer.bin:
// none), syncs them and renames it to dir (dir must not exist or be an empty directory), so dir
// never holds a partial checkpoint.
// UsageError when dir holds files or cannot be created; Error if writing fails midway.
void save_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                   const float* params, const Tokenizer* tokenizer = nullptr);

}  // namespace mpitrain
