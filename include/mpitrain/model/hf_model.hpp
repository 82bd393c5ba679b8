// A Hugging Face checkpoint directory: config.json (hf_config.hpp) and the weights, in
// model.safetensors or shards with an index (safetensors.hpp), in the conventions of
// `transformers`, so that `GPT2LMHeadModel.from_pretrained(dir)` and
// `LlamaForCausalLM.from_pretrained(dir)` read what the trainer wrote, and the trainer reads
// (--init-from) what they save in fp32, fp16 or bf16.
//
// Names and layouts (ours in params.hpp; V the real vocabulary, the padding rows are dropped):
//   gpt2   transformer.wte.weight (V, C)  (or without "transformer.", as the original gpt2
//          upload on the Hub names them), transformer.wpe.weight (maxT, C),
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
//          row 2i + a. phi3 (read only) fuses q, k, v in .self_attn.qkv_proj.weight
//          (q + 2 kv, C) and gate, up in .mlp.gate_up_proj.weight (2F, C), as ours.
//   mixtral, qwen3_moe, qwen2_moe (the llama names but in an MoE layer's MLP): mixtral's
//          model.layers.<l>.block_sparse_moe.gate.weight (E, C), its
//          .block_sparse_moe.experts.<e>.{w1 (gate), w3 (up): (Fe, C); w2 (down): (C, Fe)}.weight;
//          qwen3_moe's .mlp.gate.weight and .mlp.experts.<e>.{gate,up,down}_proj.weight (its
//          other layers' dense mlp as llama's); qwen2_moe's as qwen3_moe's, plus
//          .mlp.shared_expert.{gate,up,down}_proj.weight and .mlp.shared_expert_gate.weight (1, C).
//          Ours: moe.router (E, C), moe.experts.fc (E, 2Fe, C) = each expert's [gate; up],
//          moe.experts.proj (E, C, Fe), the shared experts in mlp.fc / mlp.proj, and
//          moe.shared_gate (1, C).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "mpitrain/data/tokenizer.hpp"
#include "mpitrain/model/config.hpp"
#include "mpitrain/model/hf_config.hpp"
#include "mpitrain/model/params.hpp"

namespace mpitrain {

// Above this many bytes of tensors the export is sharded, as transformers' default (5 GB).
inline constexpr uint64_t kHfMaxFileBytes = uint64_t{5} * 1000 * 1000 * 1000;

// The bytes of a shard size as transformers' max_shard_size writes it: an integer of bytes, or
// one followed by KB, MB, GB (powers of 1000) or KiB, MiB, GiB (of 1024), in any case but the
// B of KB, MB, GB ("500MB", "5GB", "2GiB"). UsageError naming `option` for anything else (bits
// as transformers reads "5Gb", a fraction, a space, zero, a size past 2^63).
uint64_t parse_shard_size(const std::string& text, const std::string& option);

// A directory holding config.json and model.safetensors or its index.
bool is_hf_dir(const std::string& path);

// Checks, from the safetensors headers alone, that the checkpoint holds the model `config`
// describes: every tensor present, of its shape, F32, F16 or BF16, and none the model has no
// place for (the buffers transformers itself skips aside: gpt2's attn.bias / attn.masked_bias,
// llama's rotary_emb.inv_freq). UsageError naming the file and the tensor otherwise.
void check_hf_weights(const std::string& dir, const ModelConfig& config);

// Reads the checkpoint into the tensors of layout (a rank's shard or the whole model; layout
// built from config), one at a time: put(p, values) gets each tensor p filled (p.numel floats,
// the vocabulary's padding rows zero). wanted(p), when given, narrows that to p's local elements
// [first, second) (ZeRO-3: the rank's part), the others zero. Reads from the files only the
// elements it fills (a tp slice of rows is one read, of columns one read per row), converted
// to fp32 as read; holds at most p and the stored block it needs. Returns the bytes read.
// UsageError as check_hf_weights.
uint64_t load_hf_model(
    const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
    const std::function<void(const ParamTensor&, const float*)>& put,
    const std::function<std::pair<size_t, size_t>(const ParamTensor&)>& wanted = {});

// UsageError unless transformers has a model for config (Qwen2, the q/k/v biases without an
// o_proj bias, and Qwen3, the per-head q/k norms, have no MLP biases; Qwen3's attention_bias is
// on all of q, k, v, o or none; Mixtral has experts in every layer and no biases; neither it nor
// Qwen3-MoE has shared experts).
void require_hf_expressible(const std::string& dir, const ModelConfig& config);

// Writes config.json and the weights (fp32) into dir.tmp: model.safetensors, or, when the
// tensors exceed max_file_bytes, model-0000N-of-0000M.safetensors of at most that many bytes
// each (a larger tensor alone in its file) and model.safetensors.index.json; with the
// tokenizer's files when one is given (gpt2: vocab.json + merges.txt, sentencepiece:
// tokenizer.model, huggingface: tokenizer.json + tokenizer_config.json + chat_template.jinja;
// bytes and llm.c's decode-only gpt2_tokenizer.bin: none), syncs them and
// renames it to dir (dir must not exist or be an empty directory), so dir never holds a partial
// checkpoint. UsageError when dir holds files or cannot be created; Error if writing fails
// midway. router: the run's routing loss keys, written into an MoE model's config.json.
void save_hf_model(const std::string& dir, const ModelConfig& config, const ParamLayout& layout,
                   const float* params, const Tokenizer* tokenizer = nullptr,
                   uint64_t max_file_bytes = kHfMaxFileBytes, const HfRouterKeys& router = {});

}  // namespace mpitrain
