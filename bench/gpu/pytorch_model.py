#!/usr/bin/env python3
"""The PyTorch reference of bench/gpu/trainer_vs_pytorch.sh: one GPT-2 or Llama training step on a GPU.

    python3 bench/gpu/pytorch_model.py --arch gpt2|llama --n-layer L --n-head H [--n-kv-head KV]
        --d-model C [--d-ff F] --vocab V --seq-len T --batch B [--grad-accum A] [--steps S]
        [--warmup W] [--compile 0|1] [--peak-tflops P] [--impl auto|transformers|native]

The same shapes as the trainer's model (include/mpitrain/model/config.hpp), vocabulary padded to
a multiple of 128 as the trainer pads it:
  gpt2:  learned positions, LayerNorm, GELU-tanh MLP, biases, tied embeddings;
  llama: RMSNorm, RoPE, SwiGLU, grouped-query attention with KV key/value heads, untied lm head,
         no biases.
--impl transformers (auto: where transformers imports) builds transformers' own GPT2LMHeadModel or
LlamaForCausalLM from a config of these shapes (random weights, no dropout, attention through
PyTorch's scaled_dot_product_attention: attn_implementation="sdpa"): what a PyTorch user runs.
--impl native is this file's model of the same shapes from PyTorch's modules (nn.LayerNorm,
nn.RMSNorm where this PyTorch has it, F.scaled_dot_product_attention(is_causal=True); one fused
gate/up weight of 2F rows). fp32 parameters under bf16 autocast, the loss as the trainer's
(cross-entropy of fp32 logits against the next tokens), AdamW (fused if this PyTorch has it; weight decay 0.1 on matrices only, as the trainer) after
clipping the global gradient norm to 1 (the trainer's default --grad-clip). Random tokens, one
fixed batch on the device. A step = A x (forward + backward on B sequences) + clip + AdamW;
W warm-up steps (torch.compile compiles in the first) are not timed, each timed step is bracketed
by torch.cuda.synchronize(), and the median of S timed steps is reported. With --compile 1 a
failing torch.compile falls back to eager (a note on stderr, "compiled 0" in the result).

Prints lines starting with "# " (shapes, parameters, memory) and one result line:
    tokens_per_s X ms_per_step Y mfu Z compiled 0|1 impl NAME
MFU = flops/token x tokens/s / peak, flops/token = 6 N + 12 L C T (PaLM), N as the trainer's
ParamLayout::matmul_params() counts it (see matmul_params below).
"""
import argparse
import importlib.util
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def padded_vocab(v):
    return (v + 127) // 128 * 128


def default_d_ff(arch, d):
    # as the trainer's --d-ff 0: 4 C (gpt2), 8/3 C rounded up to 64 (llama)
    return 4 * d if arch == "gpt2" else (8 * d // 3 + 63) // 64 * 64


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):  # y = x / sqrt(mean(x^2) + eps) * w, in fp32
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def rope(x, cos, sin):  # x (B, H, T, hs); rotate the two halves of each head by the position angles
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).type_as(x)


def make_norm(llama, d):  # PyTorch's own modules where it has them (nn.RMSNorm: 2.4 on)
    if not llama:
        return nn.LayerNorm(d, eps=1e-5)
    return nn.RMSNorm(d, eps=1e-5) if hasattr(nn, "RMSNorm") else RMSNorm(d, 1e-5)


class Block(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.llama = a.arch == "llama"
        self.n_head, self.n_kv, self.hs = a.n_head, a.n_kv_head, a.d_model // a.n_head
        d, f, bias = a.d_model, a.d_ff, not self.llama
        self.ln1, self.ln2 = make_norm(self.llama, d), make_norm(self.llama, d)
        self.qkv = nn.Linear(d, (self.n_head + 2 * self.n_kv) * self.hs, bias=bias)
        self.proj = nn.Linear(self.n_head * self.hs, d, bias=bias)
        self.fc = nn.Linear(d, 2 * f if self.llama else f, bias=bias)  # llama: [gate; up]
        self.fc_proj = nn.Linear(f, d, bias=bias)

    def attention(self, x, cos, sin):
        b, t, _ = x.shape
        q, k, v = self.qkv(x).split([self.n_head * self.hs, self.n_kv * self.hs, self.n_kv * self.hs], dim=2)
        q = q.view(b, t, self.n_head, self.hs).transpose(1, 2)
        k = k.view(b, t, self.n_kv, self.hs).transpose(1, 2)
        v = v.view(b, t, self.n_kv, self.hs).transpose(1, 2)
        if self.llama:
            q, k = rope(q, cos, sin), rope(k, cos, sin)
        if self.n_kv != self.n_head:  # GQA: each key/value head serves n_head / n_kv query heads
            k = k.repeat_interleave(self.n_head // self.n_kv, dim=1)
            v = v.repeat_interleave(self.n_head // self.n_kv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, self.n_head * self.hs))

    def mlp(self, x):
        h = self.fc(x)
        if self.llama:
            gate, up = h.chunk(2, dim=-1)
            return self.fc_proj(F.silu(gate) * up)
        return self.fc_proj(F.gelu(h, approximate="tanh"))

    def forward(self, x, cos, sin):
        x = x + self.attention(self.ln1(x), cos, sin)
        return x + self.mlp(self.ln2(x))


class Model(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.llama = a.arch == "llama"
        vp, d = padded_vocab(a.vocab), a.d_model
        self.wte = nn.Embedding(vp, d)
        self.wpe = None if self.llama else nn.Embedding(a.seq_len, d)
        self.blocks = nn.ModuleList(Block(a) for _ in range(a.n_layer))
        self.ln_f = make_norm(self.llama, d)
        self.lm_head = nn.Linear(d, vp, bias=False) if self.llama else None
        hs = d // a.n_head
        angle = torch.outer(torch.arange(a.seq_len, dtype=torch.float32),
                            10000.0 ** (-torch.arange(0, hs, 2, dtype=torch.float32) / hs))
        self.register_buffer("cos", angle.cos(), persistent=False)  # (T, hs/2)
        self.register_buffer("sin", angle.sin(), persistent=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(t, device=idx.device))
        cos, sin = self.cos[:t], self.sin[:t]
        for block in self.blocks:
            x = block(x, cos, sin)
        x = self.ln_f(x)
        logits = self.lm_head(x) if self.llama else x @ self.wte.weight.t()  # gpt2: tied
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


class TransformersLoss(nn.Module):
    """transformers' own model of the shapes, returning the loss as Model does."""

    def __init__(self, a):
        super().__init__()
        import transformers  # noqa: PLC0415 (only this implementation needs it)

        common = dict(vocab_size=padded_vocab(a.vocab), initializer_range=0.02, use_cache=False)
        if a.arch == "gpt2":
            config = transformers.GPT2Config(
                n_positions=a.seq_len, n_embd=a.d_model, n_layer=a.n_layer, n_head=a.n_head,
                n_inner=a.d_ff, activation_function="gelu_new", layer_norm_epsilon=1e-5,
                resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True, **common)
        else:
            config = transformers.LlamaConfig(
                hidden_size=a.d_model, intermediate_size=a.d_ff, num_hidden_layers=a.n_layer,
                num_attention_heads=a.n_head, num_key_value_heads=a.n_kv_head,
                max_position_embeddings=a.seq_len, rms_norm_eps=1e-5, attention_bias=False,
                mlp_bias=False, tie_word_embeddings=False, **common)
        self.model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
        self.name = f"transformers {transformers.__version__} {type(self.model).__name__} (sdpa)"

    def forward(self, idx, targets):
        logits = self.model(input_ids=idx).logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def matmul_params(model, a):
    """N of the PaLM formula as the trainer's ParamLayout::matmul_params() counts it: every
    parameter of the blocks (matrices, biases and norm weights) and of the final norm, plus the
    matrix that produces the logits (gpt2: the tied wte; llama: lm_head, padded vocabulary);
    not the lookups: gpt2's position embedding (T x C), llama's untied input embedding (Vp x C)."""
    lookups = a.d_model * (a.seq_len if a.arch == "gpt2" else padded_vocab(a.vocab))
    return sum(p.numel() for p in model.parameters()) - lookups


def expected_matmul_params(a):  # the same count from the shapes alone (a cross-check)
    d, f, hs, vp = a.d_model, a.d_ff, a.d_model // a.n_head, padded_vocab(a.vocab)
    qkv = (a.n_head + 2 * a.n_kv_head) * hs
    if a.arch == "llama":
        block = 2 * d + qkv * d + d * a.n_head * hs + 2 * f * d + f * d
        return a.n_layer * block + d + vp * d
    block = 4 * d + qkv * (d + 1) + d * d + d + f * (d + 1) + f * d + d
    return a.n_layer * block + 2 * d + vp * d


def make_optimizer(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    try:
        return torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=True), "fused"
    except (TypeError, RuntimeError):
        return torch.optim.AdamW(groups, lr=1e-4, betas=(0.9, 0.95), eps=1e-8), "default"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", choices=["gpt2", "llama"], required=True)
    p.add_argument("--n-layer", type=int, required=True)
    p.add_argument("--n-head", type=int, required=True)
    p.add_argument("--n-kv-head", type=int, default=0, help="0 = n-head")
    p.add_argument("--d-model", type=int, required=True)
    p.add_argument("--d-ff", type=int, default=0, help="0 = the trainer's default")
    p.add_argument("--vocab", type=int, required=True, help="padded to a multiple of 128")
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--batch", type=int, required=True, help="sequences per forward/backward")
    p.add_argument("--grad-accum", type=int, default=1, help="forward/backward passes per step")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps before them")
    p.add_argument("--compile", type=int, choices=[0, 1], default=1)
    p.add_argument("--peak-tflops", type=float, default=989.4, help="H100/H200 dense bf16")
    p.add_argument("--impl", choices=["auto", "transformers", "native"], default="auto",
                   help="auto: transformers where it imports, else native")
    a = p.parse_args()
    a.n_kv_head = a.n_kv_head or a.n_head
    a.d_ff = a.d_ff or default_d_ff(a.arch, a.d_model)
    if a.arch == "gpt2" and a.n_kv_head != a.n_head:
        p.error("gpt2 has n-kv-head == n-head")
    if a.d_model % a.n_head or a.n_head % a.n_kv_head or min(a.steps, a.batch, a.grad_accum) < 1:
        p.error("need n-head | d-model, n-kv-head | n-head, steps, batch, grad-accum >= 1")
    if not torch.cuda.is_available():
        print("SKIP: torch.cuda.is_available() is False")
        return 0

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True  # only fp32 matmuls outside autocast (none here)
    dev = torch.device("cuda")
    if a.impl == "auto":
        a.impl = "transformers" if importlib.util.find_spec("transformers") else "native"
    model = (TransformersLoss(a) if a.impl == "transformers" else Model(a)).to(dev)
    impl = getattr(model, "name", f"native (torch {torch.__version__} modules)")
    n_matmul, n_total = matmul_params(model, a), sum(q.numel() for q in model.parameters())
    assert n_matmul == expected_matmul_params(a), (n_matmul, expected_matmul_params(a))
    opt, opt_kind = make_optimizer(model)
    data = torch.randint(0, a.vocab, (a.batch, a.seq_len + 1), device=dev)
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    print(f"# torch {torch.__version__} on {torch.cuda.get_device_name()} | {a.arch} L{a.n_layer} "
          f"H{a.n_head} KV{a.n_kv_head} C{a.d_model} F{a.d_ff} V{a.vocab} (padded "
          f"{padded_vocab(a.vocab)}) T{a.seq_len} B{a.batch}x{a.grad_accum} | {n_total} parameters, "
          f"N (matmul) {n_matmul} | AdamW {opt_kind} | {impl}")

    compiled = a.compile
    fwd = model
    if compiled:
        try:
            fwd = torch.compile(model)
        except Exception as e:  # noqa: BLE001 (any failure of the compiler means: run eager)
            print(f"# note: torch.compile unavailable ({type(e).__name__}: {e}); eager", file=sys.stderr)
            compiled, fwd = 0, model

    params = list(model.parameters())

    def step(f):
        opt.zero_grad(set_to_none=True)
        for _ in range(a.grad_accum):
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = f(idx, targets) / a.grad_accum
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss

    t0 = time.perf_counter()
    try:
        for _ in range(a.warmup):
            step(fwd)
        torch.cuda.synchronize()
    except torch.cuda.OutOfMemoryError:
        raise
    except Exception as e:  # noqa: BLE001 (compile failures surface at the first call)
        if not compiled:
            raise
        print(f"# note: torch.compile failed ({type(e).__name__}: {str(e)[:300]}); eager",
              file=sys.stderr)
        torch._dynamo.reset()
        compiled, fwd = 0, model
        for _ in range(a.warmup):
            step(fwd)
        torch.cuda.synchronize()
    print(f"# warm-up ({a.warmup} steps{', compiling' if compiled else ''}) "
          f"{time.perf_counter() - t0:.1f} s")

    times = []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        loss = step(fwd)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    sec = statistics.median(times)
    tokens_per_s = a.batch * a.grad_accum * a.seq_len / sec
    flops_per_token = 6.0 * n_matmul + 12.0 * a.n_layer * a.d_model * a.seq_len
    mfu = flops_per_token * tokens_per_s / (a.peak_tflops * 1e12)
    print(f"# loss {loss.item() * a.grad_accum:.4f} | peak memory "
          f"{torch.cuda.max_memory_allocated() / 2**30:.2f} GiB | step ms min {1e3 * min(times):.2f} "
          f"max {1e3 * max(times):.2f}")
    print(f"tokens_per_s {tokens_per_s:.1f} ms_per_step {1e3 * sec:.3f} mfu {mfu:.4f} compiled {compiled} "
          f"impl {a.impl}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
