"""A reference forward of a Hugging Face checkpoint directory, written from transformers' own
conventions (not from mpitrain's code) in plain PyTorch, in float64, without the transformers
package: GPT2LMHeadModel (Conv1D weights stored (in, out), tanh GELU, scale_attn_weights and
scale_attn_by_inverse_layer_idx) and LlamaForCausalLM / Qwen2ForCausalLM / Qwen3ForCausalLM /
Phi3ForCausalLM (qkv_proj split into q, k, v; gate_up_proj chunked into gate, up; its
sliding_window as mistral's)
(RMSNorm, rotate-half RoPE with rope_scaling linear / llama3 / yarn as modeling_rope_utils.py,
grouped-query attention, mistral's and mixtral's sliding_window as masking_utils.py, SwiGLU;
head_dim, default hidden_size / heads; biases: llama's and qwen3's attention_bias on q, k, v, o
and llama's mlp_bias on gate, up, down, qwen2's (and qwen2_moe's qkv_bias) on q, k, v; qwen3's
q_norm / k_norm: RMSNorm over each head before RoPE) and MixtralForCausalLM / Qwen3MoeForCausalLM
/ Qwen2MoeForCausalLM (their MoE layers as MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock /
Qwen2MoeSparseMoeBlock: router softmax, top-k, gates renormalised over the chosen (qwen3_moe,
qwen2_moe: norm_topk_prob), sum of the experts' w2(silu(w1 x) * w3 x) weighted by their gates,
qwen2_moe's + sigmoid(shared_expert_gate x) times its shared expert's; the load-balancing loss as
load_balancing_loss_func: on the router logits of all layers concatenated, as the models'
forward calls it, or on each layer's, summed). The head is lm_head.weight, or the token
embedding where tie_word_embeddings (default: gpt2 true, the others false). safetensors is read
by hand: u64 header length, JSON header, raw little-endian tensors.

  hf_reference.py DIR PROMPT N WINDOW  ->  prints PROMPT and its greedy continuation of N byte
                                           tokens (context: the last WINDOW), as the trainer's
                                           sample prints them
  hf_reference.py DIR --loss FILE T N [TOKEN]  ->  prints the mean cross-entropy over the first
                                           N windows of FILE (nanoGPT .bin: raw uint16 tokens)
                                           as the trainer's validation takes them: window i's
                                           inputs are tokens [iT, iT+T), its targets
                                           [iT+1, iT+T+1); with TOKEN (document masking), each
                                           window cut before every TOKEN and each piece run
                                           alone, from position 0, with no mask: what the mask
                                           computes under RoPE, and with document positions
  hf_reference.py DIR --scored FILE T N TOKEN [MASK]  ->  (the boundary's loss mask: Megatron's
                                           eod_mask_loss) prints the mean cross-entropy over the
                                           targets of those N windows whose input is not TOKEN
                                           (-1: none) and, with MASK (a raw file of a uint8 per
                                           token of FILE), whose mask byte is 1,
                                           one mean over all N windows, and the gradient norm of
                                           that mean over every tensor of the checkpoint (MoE:
                                           of that mean + router_aux_loss_coef x the
                                           all-layers load-balancing loss of the N windows as
                                           one micro-batch)
  hf_reference.py DIR --aux FILE T N   ->  (MoE) the load-balancing loss of those N windows'
                                           N*T rows (one micro-batch of N) over the router
                                           logits of all MoE layers concatenated (transformers')
  hf_reference.py DIR --aux-per-layer FILE T N  ->  the same loss of each layer's router logits,
                                           summed over the layers
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


def causal_attention(q, k, v, divisor=None, window=None):  # (heads, T, hs) each; scores / divisor
    T, hs = q.shape[1], q.shape[2]
    scores = q @ k.transpose(1, 2) / (math.sqrt(hs) if divisor is None else divisor)
    mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    if window is not None:  # masking_utils' sliding_window_overlay keeps key j > i - window
        mask |= torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-window)
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
    return ln(x, "transformer.ln_f") @ head(c, w, True, "transformer.wte.weight").T


def head(c, w, tied_default, embedding):  # PreTrainedModel ties lm_head to the input embedding
    return w[embedding] if c.get("tie_word_embeddings", tied_default) else w["lm_head.weight"]


def rope_inv_freq(c, hs):  # modeling_rope_utils.py: default, linear, llama3, yarn
    """(inv_freq, attention_factor): the factor multiplies cos and sin"""
    base = c.get("rope_theta", 10000.0)
    inv = 1.0 / base ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs)
    s = c.get("rope_scaling") or {}
    kind = s.get("rope_type", s.get("type", "default"))
    if kind == "linear":
        return inv / s["factor"], 1.0
    if kind == "yarn":  # _compute_yarn_parameters: the factor as given, truncate true
        factor = s["factor"]
        orig = s.get("original_max_position_embeddings") or c["max_position_embeddings"]
        attention = s.get("attention_factor") or (0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0)

        def correction_dim(rotations):
            return hs * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))
        low = max(math.floor(correction_dim(s.get("beta_fast") or 32)), 0)
        high = min(math.ceil(correction_dim(s.get("beta_slow") or 1)), hs - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(hs // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrapolation = 1 - ramp
        return inv / factor * (1 - extrapolation) + inv * extrapolation, attention
    if kind == "llama3":  # _compute_llama3_parameters
        factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
        old = s["original_max_position_embeddings"]
        low_freq_wavelen, high_freq_wavelen = old / low, old / high
        wavelen = 2 * math.pi / inv
        inv_llama = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
        smooth = (old / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
        medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
        return torch.where(medium, smoothed, inv_llama), 1.0
    assert kind == "default", f"rope_scaling {kind}"
    return inv, 1.0


def is_moe_layer(c, l):  # MixtralDecoderLayer: every one; Qwen3MoeDecoderLayer's (Qwen2Moe's) rule
    if c["model_type"] == "mixtral":
        return True
    return (c["model_type"] in ("qwen3_moe", "qwen2_moe")
            and l not in (c.get("mlp_only_layers") or [])
            and (l + 1) % c.get("decoder_sparse_step", 1) == 0)


def sparse_moe(c, w, p, x, router_logits):  # MixtralSparseMoeBlock / Qwen3MoeSparseMoeBlock
    mixtral = c["model_type"] == "mixtral"
    block = p + ("block_sparse_moe." if mixtral else "mlp.")
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    logits = x @ w[block + "gate.weight"].T  # (T, E)
    router_logits.append(logits)
    weights, chosen = torch.topk(torch.softmax(logits, dim=-1), c["num_experts_per_tok"], dim=-1)
    if mixtral or c.get("norm_topk_prob", False):
        weights = weights / weights.sum(dim=-1, keepdim=True)
    out = torch.zeros_like(x)
    for e in range(logits.shape[1]):
        rows, k = torch.where(chosen == e)
        if len(rows) == 0:
            continue
        gate, up, down = (w[f"{block}experts.{e}.{n}.weight"] for n in names)
        xe = x[rows]
        y = (torch.nn.functional.silu(xe @ gate.T) * (xe @ up.T)) @ down.T
        out.index_add_(0, rows, y * weights[rows, k, None])
    if c["model_type"] == "qwen2_moe":  # + sigmoid(shared_expert_gate(x)) * shared_expert(x)
        gate, up, down = (w[f"{block}shared_expert.{n}.weight"] for n in names)
        shared = (torch.nn.functional.silu(x @ gate.T) * (x @ up.T)) @ down.T
        out = out + torch.sigmoid(x @ w[block + "shared_expert_gate.weight"].T) * shared
    return out


def load_balancing_loss(logits, top_k):  # load_balancing_loss_func of (R, E) router logits
    experts = logits.shape[1]
    routing = torch.softmax(logits, dim=-1)
    _, chosen = torch.topk(routing, top_k, dim=-1)
    tokens_per_expert = torch.nn.functional.one_hot(chosen, experts).double().mean(dim=0)  # (K, E)
    return (tokens_per_expert * routing.mean(dim=0).unsqueeze(0)).sum() * experts


def llama_logits(c, w, ids, router_logits=None):
    T, C, H = len(ids), c["hidden_size"], c["num_attention_heads"]
    KV = c.get("num_key_value_heads", H)
    hs = c.get("head_dim") or C // H
    qwen2 = c["model_type"] == "qwen2" or (c["model_type"] == "qwen2_moe"  # on q, k, v only
                                           and c.get("qkv_bias", True))
    window = c.get("sliding_window") if c["model_type"] in ("mistral", "mixtral", "phi3") else None
    phi3 = c["model_type"] == "phi3"
    attention_bias, mlp_bias = qwen2 or c.get("attention_bias", False), c.get("mlp_bias", False)

    def linear(x, p, bias):  # nn.Linear: x @ W.T (+ b)
        return x @ w[p + ".weight"].T + (w[p + ".bias"] if bias else 0)
    eps = c["rms_norm_eps"]

    def rms(x, p):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w[p]

    def rotate_half(x):
        return torch.cat((-x[..., hs // 2:], x[..., : hs // 2]), dim=-1)

    inv_freq, attention_factor = rope_inv_freq(c, hs)
    angles = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos() * attention_factor, emb.sin() * attention_factor

    x = w["model.embed_tokens.weight"][ids]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        a = rms(x, p + "input_layernorm.weight")
        if phi3:  # Phi3Attention: qkv_proj's output split as [q | k | v]
            q, k, v = linear(a, p + "self_attn.qkv_proj", False).split([H * hs, KV * hs, KV * hs], -1)
        else:
            q, k, v = (linear(a, p + f"self_attn.{n}_proj", attention_bias) for n in "qkv")
        q = q.reshape(T, H, hs).transpose(0, 1)
        k, v = (t.reshape(T, KV, hs).transpose(0, 1) for t in (k, v))
        if c["model_type"] in ("qwen3", "qwen3_moe"):  # q_norm / k_norm over each head, then RoPE
            q, k = rms(q, p + "self_attn.q_norm.weight"), rms(k, p + "self_attn.k_norm.weight")
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=0), v.repeat_interleave(H // KV, dim=0)
        y = causal_attention(q, k, v, window=window).transpose(0, 1).reshape(T, H * hs)
        x = x + linear(y, p + "self_attn.o_proj", attention_bias and not qwen2)
        m = rms(x, p + "post_attention_layernorm.weight")
        if is_moe_layer(c, l):
            x = x + sparse_moe(c, w, p, m, [] if router_logits is None else router_logits)
            continue
        if phi3:  # Phi3MLP: gate_up_proj's output chunked as [gate | up]
            gate, up = linear(m, p + "mlp.gate_up_proj", False).chunk(2, dim=-1)
        else:
            gate, up = (linear(m, p + f"mlp.{n}_proj", mlp_bias) for n in ("gate", "up"))
        x = x + linear(torch.nn.functional.silu(gate) * up, p + "mlp.down_proj", mlp_bias)
    return rms(x, "model.norm.weight") @ head(c, w, False, "model.embed_tokens.weight").T


def read_tokens(path):
    with open(path, "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.int16).long() & 0xFFFF


def micro_batch_aux_loss(config, windows, per_layer):  # windows: each one's router logits by layer
    layers = [torch.cat([w[l] for w in windows]) for l in range(len(windows[0]))]  # (n T, E) each
    k = config["num_experts_per_tok"]
    if per_layer:
        return sum(load_balancing_loss(logits, k) for logits in layers)
    return load_balancing_loss(torch.cat(layers), k)  # the layers' rows concatenated


def aux_loss(config, weights, path, T, n, per_layer):  # one micro-batch of n windows
    tokens, windows = read_tokens(path), []  # each window's router logits, layer by layer
    for i in range(n):
        windows.append([])
        llama_logits(config, weights, tokens[i * T:i * T + T], windows[-1])
    return float(micro_batch_aux_loss(config, windows, per_layer))


def documents(forward, token):  # forward over each document of ids alone, a new one at each token
    def pieces(config, weights, ids):
        starts = [0] + [t for t in range(1, len(ids)) if ids[t] == token] + [len(ids)]
        return torch.cat([forward(config, weights, ids[a:b]) for a, b in zip(starts, starts[1:])])
    return pieces


def mean_loss(forward, config, weights, path, T, n):
    tokens = read_tokens(path)
    losses = [torch.nn.functional.cross_entropy(forward(config, weights, tokens[i * T:i * T + T]),
                                                tokens[i * T + 1:i * T + T + 1]) for i in range(n)]
    return float(torch.stack(losses).mean())


def scored_loss(forward, config, weights, path, T, n, token, mask):  # (loss, gradient norm)
    tokens, total, scored, windows = read_tokens(path), 0.0, 0, []
    if mask:
        with open(mask, "rb") as f:
            mask = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8)
    moe = "router_aux_loss_coef" in config
    for w in weights.values():
        w.requires_grad_(True)
    for i in range(n):
        ids, targets = tokens[i * T:i * T + T], tokens[i * T + 1:i * T + T + 1].clone()
        targets[ids == token] = -100  # cross_entropy's ignore_index
        if mask is not None:
            targets[mask[i * T + 1:i * T + T + 1] == 0] = -100
        windows.append([])
        logits = forward(config, weights, ids, windows[-1]) if moe else forward(config, weights, ids)
        total = total + torch.nn.functional.cross_entropy(logits, targets, ignore_index=-100,
                                                          reduction="sum")
        scored += int((targets != -100).sum())
    loss = total / scored
    objective = loss
    if moe:  # the n windows as one micro-batch
        objective = loss + config["router_aux_loss_coef"] * micro_batch_aux_loss(config, windows,
                                                                                 False)
    objective.backward()
    squares = sum(float((w.grad ** 2).sum()) for w in weights.values() if w.grad is not None)
    return float(loss), math.sqrt(squares)


def main():
    directory = sys.argv[1]
    config, weights = load(directory)
    forward = gpt2_logits if config["model_type"] == "gpt2" else llama_logits
    if sys.argv[2] in ("--aux", "--aux-per-layer"):
        with torch.no_grad():
            print(repr(aux_loss(config, weights, sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
                                sys.argv[2] == "--aux-per-layer")))
        return
    if sys.argv[2] == "--scored":
        print("%r %r" % scored_loss(forward, config, weights, sys.argv[3], int(sys.argv[4]),
                                    int(sys.argv[5]), int(sys.argv[6]),
                                    sys.argv[7] if len(sys.argv) > 7 else None))
        return
    if sys.argv[2] == "--loss":
        if len(sys.argv) > 6:
            forward = documents(forward, int(sys.argv[6]))
        with torch.no_grad():
            print(repr(mean_loss(forward, config, weights, sys.argv[3], int(sys.argv[4]),
                                 int(sys.argv[5]))))
        return
    prompt, n, window = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ids = list(prompt.encode())
    with torch.no_grad():
        for _ in range(n):
            ids.append(int(forward(config, weights, torch.tensor(ids[-window:]))[-1].argmax()))
    sys.stdout.buffer.write(bytes(ids) + b"\n")


if __name__ == "__main__":
    main()
