#!/usr/bin/env python3
"""A plain fp32 GPT-2 in PyTorch, timed on CPU: the reference column of bench/run.sh.

    python3 bench/pytorch_gpt2.py --config tiny|gpt2-small --threads N [--steps S]

Same shapes as the mpitrain benchmark (learned positions, LayerNorm, GELU-tanh, causal attention,
tied embeddings, AdamW), random tokens. Times forward + backward + optimizer step; the first step
is a warm-up and is not counted. Prints one line: `ms_per_step <median of the timed steps>`.
"""
import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    # name: (n_layer, n_head, d_model, vocab, seq_len, batch)
    "tiny": (4, 4, 128, 512, 64, 4),
    "gpt2-small": (12, 12, 768, 50304, 256, 4),
}


class Block(nn.Module):
    def __init__(self, d, n_head, seq_len):
        super().__init__()
        self.n_head = n_head
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.fc_proj = nn.Linear(4 * d, d)
        mask = torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, seq_len, seq_len), persistent=False)

    def attention(self, x):
        b, t, d = x.shape
        hs = d // self.n_head
        q, k, v = self.qkv(x).split(d, dim=2)
        q = q.view(b, t, self.n_head, hs).transpose(1, 2)
        k = k.view(b, t, self.n_head, hs).transpose(1, 2)
        v = v.view(b, t, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, d))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, n_layer, n_head, d, vocab, seq_len):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(seq_len, d)
        self.blocks = nn.ModuleList(Block(d, n_head, seq_len) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied embeddings
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), required=True)
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--steps", type=int, default=10, help="timed steps (after one warm-up)")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    n_layer, n_head, d, vocab, seq_len, batch = CONFIGS[args.config]
    model = GPT2(n_layer, n_head, d, vocab, seq_len)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    data = torch.randint(0, vocab, (batch, seq_len + 1))
    idx, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    times = []
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        elapsed = time.perf_counter() - t0
        if step > 0:
            times.append(elapsed)
    print(f"ms_per_step {1e3 * statistics.median(times):.3f}")


if __name__ == "__main__":
    main()
