"""A small random Hugging Face checkpoint whose config.json has exactly the keys of a real one
(tests/support/hf_configs/NAME.json), its sizes shrunk, written as transformers' save_pretrained
writes it (names and shapes of GPT2LMHeadModel / LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM
/ Phi3ForCausalLM (qkv_proj, gate_up_proj) / MixtralForCausalLM / Qwen3MoeForCausalLM /
Qwen2MoeForCausalLM: biases as attention_bias,
mlp_bias, qwen2 and qwen2_moe's qkv_bias ask, qwen3's q_norm / k_norm, lm_head unless tied, the
experts of an MoE layer: 4, top 2, and qwen2_moe's shared expert and its gate), independently
of mpitrain.

  hf_checkpoint.py CONFIG OUT [--dtype F32|F16|BF16] [--round-to BF16] [--shard-bytes N]
                   [--bare-names] [--lm-head] [--set KEY=JSON ...]

--round-to BF16 stores F32 values that are exact in BF16 (the same model as --dtype BF16);
--shard-bytes: model-0000N-of-0000M.safetensors of at most N bytes and the index;
--bare-names: gpt2 as the original Hub upload (h.0..., wte.weight, and its attn.bias buffers);
--lm-head: gpt2 with an lm_head.weight of its own; --set: config keys after shrinking.
"""
import argparse
import json
import os
import struct

import numpy as np
GPT2_SIZES = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 64, "n_ctx": 64,
              "vocab_size": 256}
LLAMA_SIZES = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
               "hidden_size": 64, "intermediate_size": 128, "max_position_embeddings": 64,
               "vocab_size": 256}
EXPERT_SIZES = {"mixtral": {"num_local_experts": 4, "num_experts_per_tok": 2},
                "qwen3_moe": {"num_experts": 4, "num_experts_per_tok": 2,
                              "moe_intermediate_size": 32},
                "qwen2_moe": {"num_experts": 4, "num_experts_per_tok": 2,
                              "moe_intermediate_size": 32, "shared_expert_intermediate_size": 64}}
QWEN3_TYPES = ("qwen3", "qwen3_moe")  # Qwen3Attention's q_norm / k_norm


def is_moe_layer(c, l):  # MixtralDecoderLayer: every one; Qwen3MoeDecoderLayer's (Qwen2Moe's) rule
    if c["model_type"] == "mixtral":
        return True
    return (c["model_type"] in ("qwen3_moe", "qwen2_moe")
            and l not in (c.get("mlp_only_layers") or [])
            and (l + 1) % c.get("decoder_sparse_step", 1) == 0)


def expert_width(c):  # MixtralBlockSparseTop2MLP: intermediate_size; Qwen3MoeMLP in the block
    return c["intermediate_size"] if c["model_type"] == "mixtral" else c["moe_intermediate_size"]


def shrunk(config):
    sizes = GPT2_SIZES if config["model_type"] == "gpt2" else LLAMA_SIZES
    config.update(sizes)
    config.update(EXPERT_SIZES.get(config["model_type"], {}))
    if "head_dim" in config:  # qwen3's is twice hidden / heads, as the real one's (128 of 1024 / 16)
        config["head_dim"] = config["hidden_size"] // config["num_attention_heads"]
        if config["model_type"] in QWEN3_TYPES:
            config["head_dim"] *= 2
    if config.get("sliding_window"):
        config["sliding_window"] = config["max_position_embeddings"]
    return config


def gpt2_shapes(c, bare):
    C, p = c["n_embd"], "" if bare else "transformer."
    shapes = {p + "wte.weight": (c["vocab_size"], C), p + "wpe.weight": (c["n_positions"], C)}
    for l in range(c["n_layer"]):
        h = f"{p}h.{l}."
        shapes.update({h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
                       h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
                       h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
                       h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
                       h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
                       h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,)})
        if bare:  # the causal-mask buffer the original upload carries
            shapes[h + "attn.bias"] = (1, 1, c["n_positions"], c["n_positions"])
    shapes.update({p + "ln_f.weight": (C,), p + "ln_f.bias": (C,)})
    return shapes


def llama_shapes(c):
    C, F, H = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"]
    hs = c.get("head_dim") or C // H
    kv = c["num_key_value_heads"] * hs
    shapes = {"model.embed_tokens.weight": (c["vocab_size"], C)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        shapes[p + "input_layernorm.weight"] = (C,)
        if c["model_type"] == "phi3":  # Phi3Attention's [q; k; v] in one
            shapes[p + "self_attn.qkv_proj.weight"] = (H * hs + 2 * kv, C)
        else:
            shapes.update({p + "self_attn.q_proj.weight": (H * hs, C),
                           p + "self_attn.k_proj.weight": (kv, C),
                           p + "self_attn.v_proj.weight": (kv, C)})
        shapes.update({p + "self_attn.o_proj.weight": (C, H * hs),
                       p + "post_attention_layernorm.weight": (C,)})
        if c["model_type"] == "phi3":  # Phi3MLP's [gate; up] in one
            shapes.update({p + "mlp.gate_up_proj.weight": (2 * F, C), p + "mlp.down_proj.weight": (C, F)})
            continue
        if is_moe_layer(c, l):
            shapes.update(expert_shapes(c, p))
        else:
            shapes.update({p + "mlp.gate_proj.weight": (F, C), p + "mlp.up_proj.weight": (F, C),
                           p + "mlp.down_proj.weight": (C, F)})
        attention_bias = c.get("attention_bias", False)  # llama, qwen3: on q, k, v and o
        qkv_bias = c["model_type"] == "qwen2" or (c["model_type"] == "qwen2_moe"
                                                  and c.get("qkv_bias", True))
        if attention_bias or qkv_bias:  # qwen2, qwen2_moe: on q, k, v
            shapes.update({p + "self_attn.q_proj.bias": (H * hs,), p + "self_attn.k_proj.bias": (kv,),
                           p + "self_attn.v_proj.bias": (kv,)})
        if attention_bias:
            shapes[p + "self_attn.o_proj.bias"] = (C,)
        if c.get("mlp_bias", False):
            shapes.update({p + "mlp.gate_proj.bias": (F,), p + "mlp.up_proj.bias": (F,),
                           p + "mlp.down_proj.bias": (C,)})
        if c["model_type"] in QWEN3_TYPES:  # RMSNorm over each q and k head
            shapes.update({p + "self_attn.q_norm.weight": (hs,), p + "self_attn.k_norm.weight": (hs,)})
    shapes["model.norm.weight"] = (C,)
    if not c.get("tie_word_embeddings", False):
        shapes["lm_head.weight"] = (c["vocab_size"], C)
    return shapes


def expert_shapes(c, p):  # the router (E, C) and each expert's gate, up (Fe, C), down (C, Fe)
    C, Fe = c["hidden_size"], expert_width(c)
    mixtral = c["model_type"] == "mixtral"
    block = p + ("block_sparse_moe." if mixtral else "mlp.")
    experts = c["num_local_experts"] if mixtral else c["num_experts"]
    shapes = {block + "gate.weight": (experts, C)}
    for e in range(experts):
        x = f"{block}experts.{e}."
        for name, shape in zip(("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj"),
                               ((Fe, C), (Fe, C), (C, Fe))):
            shapes[f"{x}{name}.weight"] = shape
    if c["model_type"] == "qwen2_moe":  # Qwen2MoeSparseMoeBlock's shared_expert and its gate
        S = c["shared_expert_intermediate_size"]
        shapes.update({p + "mlp.shared_expert.gate_proj.weight": (S, C),
                       p + "mlp.shared_expert.up_proj.weight": (S, C),
                       p + "mlp.shared_expert.down_proj.weight": (C, S),
                       p + "mlp.shared_expert_gate.weight": (1, C)})
    return shapes


def bf16_bits(x):  # float32 -> bfloat16 bits, rounded to nearest even
    b = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)


def stored(x, dtype):  # (dtype, little-endian bytes)
    if dtype == "BF16":
        return dtype, bf16_bits(x).tobytes()
    return dtype, x.astype(np.float16 if dtype == "F16" else np.float32).tobytes()


def write_safetensors(path, tensors):  # tensors: name -> (shape, dtype, bytes)
    header, offset = {}, 0
    for name, (shape, dtype, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _, _, raw in tensors.values():
            f.write(raw)


def main():
    a = argparse.ArgumentParser()
    a.add_argument("config")
    a.add_argument("out")
    a.add_argument("--dtype", default="F32")
    a.add_argument("--round-to")
    a.add_argument("--shard-bytes", type=int)
    a.add_argument("--bare-names", action="store_true")
    a.add_argument("--lm-head", action="store_true")
    a.add_argument("--set", action="append", default=[])
    args = a.parse_args()
    with open(args.config) as f:
        config = shrunk(json.load(f))
    for kv in args.set:
        key, value = kv.split("=", 1)
        config[key] = json.loads(value)
    if config["model_type"] == "gpt2":
        shapes = gpt2_shapes(config, args.bare_names)
        if args.lm_head:
            shapes["lm_head.weight"] = (config["vocab_size"], config["n_embd"])
    else:
        shapes = llama_shapes(config)
    rng = np.random.default_rng(0)
    tensors = {}
    for name, shape in shapes.items():
        if name.endswith("attn.bias") and len(shape) == 4:
            t = np.broadcast_to(np.tril(np.ones(shape[2:])), shape)
        elif len(shape) == 1 and "weight" in name:  # norms: around 1
            t = 1 + 0.1 * rng.standard_normal(shape)
        else:
            t = 0.1 * rng.standard_normal(shape)
        if args.round_to:  # BF16 bits back to float32
            t = (bf16_bits(t).astype(np.uint32) << 16).view(np.float32)
        tensors[name] = (shape, *stored(t, args.dtype))
    os.makedirs(args.out)
    with open(f"{args.out}/config.json", "w") as f:
        json.dump(config, f, indent=2)
    if not args.shard_bytes:
        write_safetensors(f"{args.out}/model.safetensors", tensors)
        return
    files, size = [{}], 0
    for name, t in tensors.items():
        n = len(t[2])
        if files[-1] and size + n > args.shard_bytes:
            files.append({})
            size = 0
        files[-1][name] = t
        size += n
    weight_map = {}
    for i, part in enumerate(files):
        name = f"model-{i + 1:05d}-of-{len(files):05d}.safetensors"
        write_safetensors(f"{args.out}/{name}", part)
        weight_map.update({t: name for t in part})
    total = sum(len(t[2]) for t in tensors.values())
    with open(f"{args.out}/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


if __name__ == "__main__":
    main()
