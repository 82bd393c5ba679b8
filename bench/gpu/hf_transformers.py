#!/usr/bin/env python3
"""A real client reads the trainer's --export-hf: transformers' own GPT2LMHeadModel or
LlamaForCausalLM loads the directory and its loss on a fixed batch is compared with the loss the
trainer computed on the same batch (bench/gpu/hf_transformers.sh runs it).

    hf_transformers.py data DIR T WINDOWS FILE...
        DIR/batch.bin: the first WINDOWS x T + 1 bytes of the FILEs (the fixed batch: the trainer
        evaluates it as WINDOWS windows of T + 1 tokens, stride T); DIR/train.bin: the rest.
        Both nanoGPT token files (raw little-endian uint16, one token per byte).
    hf_transformers.py check BATCH T HF_DIR LOSS [HF_DIR LOSS]...
        For each exported directory: the mean cross-entropy of the batch's targets under transformers' model (float64, on the
        CPU) against LOSS, the trainer's validation loss: within LOSS_TOL relative. The logits of
        tests/support/hf_reference.py (our own reading of transformers' conventions, which
        tests/e2e/hf_export.sh relies on) against transformers': within LOGITS_TOL,
        |ref - hf| / |hf| over the whole (WINDOWS, T, V) array. Without transformers here, the
        reference's loss is compared with LOSS instead and the script exits 77 (skipped).

Prints one line per figure; exits 1 when one is outside its bound.
"""
import array
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "support"))
import hf_reference  # noqa: E402

# The trainer's fp32 loss (the GPU's float sums in their own order) against a float64 forward:
# the bound of tests/e2e/device_cuda.sh for fp32 cuda against cpu; measured 1.4e-9 (gpt2) and
# 6.4e-9 (llama) with the trainer on the CPU (--device cpu, AMD EPYC Zen 5), not yet on a GPU.
LOSS_TOL = 1e-5
# Both float64, but for the reference's RoPE angles rounded to fp32 (~6e-8 relative each).
LOGITS_TOL = 1e-5


def write_tokens(path, data):
    with open(path, "wb") as f:
        array.array("H", list(data)).tofile(f)  # one uint16 per byte; little-endian hosts, as the trainer


def make_data(directory, seq_len, windows, files):
    text = b"".join(open(f, "rb").read() for f in files)
    n = windows * seq_len + 1
    if len(text) < 2 * n:
        sys.exit(f"hf_transformers: {len(text)} bytes of text, need {2 * n}")
    write_tokens(os.path.join(directory, "batch.bin"), text[:n])
    write_tokens(os.path.join(directory, "train.bin"), text[n:])
    print(f"# batch.bin: {windows} windows of {seq_len} + 1 byte tokens; train.bin: {len(text) - n} tokens")


def read_batch(path, seq_len):
    tokens = array.array("H")
    with open(path, "rb") as f:
        tokens.frombytes(f.read())
    windows = (len(tokens) - 1) // seq_len
    x = torch.tensor(tokens[: windows * seq_len + 1], dtype=torch.long)
    idx = torch.stack([x[i * seq_len:(i + 1) * seq_len] for i in range(windows)])
    targets = torch.stack([x[i * seq_len + 1:(i + 1) * seq_len + 1] for i in range(windows)])
    return idx, targets


def mean_loss(logits, targets):  # mean cross-entropy over every target, float64
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)).item()


def reference_logits(directory, idx):
    config, weights = hf_reference.load(directory)
    weights = {name: w.double() for name, w in weights.items()}
    forward = hf_reference.gpt2_logits if config["model_type"] == "gpt2" else hf_reference.llama_logits
    with torch.no_grad():
        return config["model_type"], torch.stack([forward(config, weights, row) for row in idx])


def transformers_logits(directory, idx):
    from transformers import AutoModelForCausalLM  # noqa: PLC0415 (absent on some machines)

    model = AutoModelForCausalLM.from_pretrained(directory, attn_implementation="eager")
    model = model.to(torch.float64).eval()
    with torch.no_grad():
        return type(model).__name__, model(input_ids=idx).logits


def relative(a, b):
    return abs(a - b) / abs(b)


def check(directory, idx, targets, trainer_loss):
    arch, ref = reference_logits(directory, idx)
    ref_loss = mean_loss(ref, targets)
    try:
        import transformers  # noqa: PLC0415
    except ImportError as e:
        d = relative(ref_loss, trainer_loss)
        print(f"{arch}: the reference's loss {ref_loss:.8f} against the trainer's {trainer_loss:.8f}: "
              f"within {d:.3g} (allowed {LOSS_TOL:g})")
        if d >= LOSS_TOL:
            print(f"FAIL: {arch}: the exported model's loss is not the trainer's")
            return 1
        print(f"SKIP: transformers is not importable here ({e})")
        return 77
    name, hf = transformers_logits(directory, idx)
    hf_loss = mean_loss(hf, targets)
    d_loss = relative(hf_loss, trainer_loss)
    d_logits = ((ref - hf).norm() / hf.norm()).item()
    print(f"{arch}: transformers {transformers.__version__} {name} on {tuple(idx.shape)} tokens: loss "
          f"{hf_loss:.8f}, the trainer's {trainer_loss:.8f}: within {d_loss:.3g} (allowed {LOSS_TOL:g}); "
          f"tests/support/hf_reference.py's logits within {d_logits:.3g} of transformers' (allowed {LOGITS_TOL:g})")
    failed = 0
    if not d_loss < LOSS_TOL:
        print(f"FAIL: {arch}: transformers' loss on the export is not the trainer's")
        failed = 1
    if not d_logits < LOGITS_TOL:
        print(f"FAIL: {arch}: tests/support/hf_reference.py does not read the export as transformers does")
        failed = 1
    return failed


def main(argv):
    if len(argv) >= 5 and argv[0] == "data":
        make_data(argv[1], int(argv[2]), int(argv[3]), argv[4:])
        return 0
    if len(argv) >= 5 and len(argv) % 2 == 1 and argv[0] == "check":
        idx, targets = read_batch(argv[1], int(argv[2]))
        results = [check(d, idx, targets, float(loss)) for d, loss in zip(argv[3::2], argv[4::2])]
        return 1 if 1 in results else max(results)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
