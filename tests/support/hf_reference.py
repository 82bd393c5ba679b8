"""A reference forward of a Hugging Face checkpoint directory, written from transformers' own
conventions (not from mpitrain's code) in plain PyTorch, without the transformers package:
GPT2LMHeadModel (Conv1D weights stored (in, out), tanh GELU, tied head, scale_attn_weights and
scale_attn_by_inverse_layer_idx) and LlamaForCausalLM (RMSNorm, rotate-half RoPE with
rope_scaling linear / llama3 as modeling_rope_utils.py, grouped-query attention, SwiGLU, own head)
with Qwen3ForCausalLM's q_norm / k_norm (RMSNorm over each head before RoPE). In float64
throughout. safetensors is read by hand: u64 header length, JSON header, raw little-endian
tensors.

  hf_reference.py DIR PROMPT N WINDOW  ->  prints PROMPT and its greedy continuation of N byte
                                           tokens (context: the last WINDOW), as the trainer's
                                           sample prints them
  hf_reference.py DIR --loss FILE T N      ->  prints the mean cross-entropy over the first N
                                           windows (T+1 tokens, stride T) of FILE (nanoGPT .bin:
                                           raw uint16 tokens), as the trainer's val_loss
"""
import json
import math
import struct
import sys

import torch

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def load(directory):
    with open(f"{directory}/config.json") as f:
        config = json.load(f)
    with open(f"{directory}/model.safetensors", "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    tensors = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        begin, end = t["data_offsets"]
        raw = bytearray(data[begin:end])
        tensors[name] = torch.frombuffer(raw, dtype=DTYPES[t["dtype"]]).double().reshape(t["shape"])
    return config, tensors


def causal_attention(q, k, v, divisor=None):  # (heads, T, hs) each; scores / divisor
    T, hs = q.shape[1], q.shape[2]
    scores = q @ k.transpose(1, 2) / (math.sqrt(hs) if divisor is None else divisor)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


def gpt2_logits(c, w, ids):
    T, C, H = len(ids), c["n_embd"], c["n_head"]
    eps = c["layer_norm_epsilon"]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]

    def ln(x, p):
        return torch.nn.functional.layer_norm(x, (C,), w[p + ".weight"], w[p + ".bias"], eps)

    def conv1d(x, p):  # HF Conv1D: x @ W (in, out) + b
        return x @ w[p + ".weight"] + w[p + ".bias"]

    for l in range(c["n_layer"]):
        h = f"transformer.h.{l}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(C, dim=-1)
        heads = [t.reshape(T, H, C // H).transpose(0, 1) for t in (q, k, v)]
        # GPT2Attention: / sqrt(hs) if scale_attn_weights, / (layer_idx + 1) if by inverse layer
        divisor = math.sqrt(C // H) if c.get("scale_attn_weights", True) else 1.0
        divisor *= l + 1 if c.get("scale_attn_by_inverse_layer_idx", False) else 1
        y = causal_attention(*heads, divisor).transpose(0, 1).reshape(T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        m = torch.nn.functional.gelu(conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc"), approximate="tanh")
        x = x + conv1d(m, h + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].T


def rope_inv_freq(c, hs):  # modeling_rope_utils.py: default, linear, llama3
    inv = 1.0 / c.get("rope_theta", 10000.0) ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    s = c.get("rope_scaling") or {}
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        return inv / s["factor"]
    if kind == "llama3":  # _compute_llama3_parameters
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        inv_llama = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(medium, smoothed, inv_llama)
    assert kind == "default", f"rope_scaling {kind}"
    return inv


def llama_logits(c, w, ids):
    T, C, H = len(ids), c["hidden_size"], c["num_attention_heads"]
    KV = c.get("num_key_value_heads", H)
    hs = c.get("head_dim") or C // H
    eps = c["rms_norm_eps"]

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p]

    def rotate_half(x):
        return torch.cat((-x[..., hs // 2:], x[..., : hs // 2]), dim=-1)

    angles = torch.outer(torch.arange(T, dtype=torch.float64), rope_inv_freq(c, hs))
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos(), emb.sin()

    x = w["model.embed_tokens.weight"][ids]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = rms(x, p + "input_layernorm.weight")
        q = (a @ w[p + "self_attn.q_proj.weight"].T).reshape(T, H, hs).transpose(0, 1)
        k = (a @ w[p + "self_attn.k_proj.weight"].T).reshape(T, KV, hs).transpose(0, 1)
        v = (a @ w[p + "self_attn.v_proj.weight"].T).reshape(T, KV, hs).transpose(0, 1)
        if c["model_type"] == "qwen3":  # Qwen3Attention: q_norm / k_norm over each head, then RoPE
            q, k = rms(q, p + "self_attn.q_norm.weight"), rms(k, p + "self_attn.k_norm.weight")
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=0), v.repeat_interleave(H // KV, dim=0)
        y = causal_attention(q, k, v).transpose(0, 1).reshape(T, H * hs)
        x = x + y @ w[p + "self_attn.o_proj.weight"].T
        m = rms(x, p + "post_attention_layernorm.weight")
        gate = torch.nn.functional.silu(m @ w[p + "mlp.gate_proj.weight"].T)
        x = x + (gate * (m @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, "model.norm.weight") @ w["lm_head.weight"].T


def main():
    directory = sys.argv[1]
    config, weights = load(directory)
    forward = gpt2_logits if config["model_type"] == "gpt2" else llama_logits
    if sys.argv[2] == "--loss":
        path, T, n = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        with open(path, "rb") as f:
            tokens = torch.frombuffer(bytearray(f.read()), dtype=torch.int16).long() & 0xFFFF
        with torch.no_grad():
            losses = [torch.nn.functional.cross_entropy(
                forward(config, weights, tokens[i * T:i * T + T]), tokens[i * T + 1:i * T + T + 1])
                for i in range(n)]
        print(repr(float(sum(losses) / n)))
        return
    prompt, n, window = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ids = list(prompt.encode())
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(forward(config, weights, torch.tensor(ids[-window:]))[-1].argmax()))
    sys.stdout.buffer.write(bytes(ids) + b"\n")


if __name__ == "__main__":
    main()
